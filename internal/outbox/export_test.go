package outbox

// SetLiveSizeSkew makes the dispatcher of o announce, for a body posted
// while it is built, the length computed plus n: a body of another
// length than announced.
func SetLiveSizeSkew(o *Options, n int64) { o.liveSizeSkew = n }
