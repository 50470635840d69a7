package postgres

// FreezeAhead is how far a build may run ahead of the freeze's COPY.
const FreezeAhead = freezeAhead

// Lag is how many bytes written to f the COPY has not sent yet.
func (f *BodyFreezer) Lag() int64 { return f.n - f.sent.Load() }
