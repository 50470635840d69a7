package auth

// SetCheck makes a check passwords with check instead of CheckPassword, so
// that a test can count the checks and hold them until it lets them go.
func SetCheck(a *Authenticator, check func(hash, password string) (bool, error)) { a.check = check }
