package config

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"time"
)

// CertificateSchedule says when a partner certificate may be encrypted to
// (it verifies the partner's signatures from the start).
type CertificateSchedule struct {
	// NotBeforeUse, when set, is when it starts to be used for outbound
	// messages.
	NotBeforeUse time.Time
	// SwitchOnFirstUse uses it for outbound messages as soon as the
	// partner has signed a message with it (Partner.CertificateUses),
	// even before NotBeforeUse.
	SwitchOnFirstUse bool
}

// Fingerprint is a certificate's SHA-256 fingerprint in hex, the key of
// Partner.CertificateUses.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// activeSince reports whether the i-th certificate may be encrypted to at
// now, and since when (the zero time: unscheduled, always).
func (p *Partner) activeSince(i int, now time.Time) (time.Time, bool) {
	var s CertificateSchedule
	if i < len(p.Schedules) {
		s = p.Schedules[i]
	}
	if s.SwitchOnFirstUse {
		if at, used := p.CertificateUses[Fingerprint(p.Certificates[i])]; used && !at.After(now) {
			if s.NotBeforeUse.IsZero() || at.Before(s.NotBeforeUse) {
				return at, true
			}
		}
	}
	if s.NotBeforeUse.IsZero() {
		// Switched on first use alone: not before that use, wherever
		// it is listed.
		return time.Time{}, !s.SwitchOnFirstUse
	}
	return s.NotBeforeUse, !now.Before(s.NotBeforeUse)
}

// EncryptionCertificate returns the certificate to encrypt to at now:
// among those whose schedule lets them be used (see CertificateSchedule)
// and that are valid at now, the one that became usable last, the first
// in file order among equals. When none is valid (all expired, already
// reported in File.Warnings), it returns the usable one that expires last,
// so that delivery degrades instead of stopping; partners commonly still
// accept messages encrypted to an expired certificate. It returns nil only
// when the partner has no certificates, which Load never produces.
func (p *Partner) EncryptionCertificate(now time.Time) *x509.Certificate {
	var best, latest, first *x509.Certificate
	var bestSince time.Time
	for i, c := range p.Certificates {
		if first == nil {
			first = c
		}
		since, usable := p.activeSince(i, now)
		if !usable {
			continue
		}
		if validAt(c, now) && (best == nil || since.After(bestSince)) {
			best, bestSince = c, since
		}
		if latest == nil || c.NotAfter.After(latest.NotAfter) {
			latest = c
		}
	}
	switch {
	case best != nil:
		return best
	case latest != nil:
		return latest
	}
	return first // every certificate scheduled for later: the first
}

// At returns the station as it is at now: the key pair that signs is the
// one whose NotBeforeUse passed last, else the one marked active. Keys
// keeps every pair (all decrypt), the signing one first.
func (st Station) At(now time.Time) Station {
	signer := -1
	var since time.Time
	for i, k := range st.Keys {
		if !k.NotBeforeUse.IsZero() && !now.Before(k.NotBeforeUse) && (signer < 0 || k.NotBeforeUse.After(since)) {
			signer, since = i, k.NotBeforeUse
		}
	}
	if signer < 0 {
		for i, k := range st.Keys {
			if k.Active && k.NotBeforeUse.IsZero() {
				signer = i
				break
			}
		}
	}
	if signer < 0 {
		return st
	}
	out := st
	out.Keys = make([]StationKey, 0, len(st.Keys))
	for i, k := range st.Keys {
		k.Active = i == signer
		if k.Active {
			out.PrivateKey, out.Certificate = k.PrivateKey, k.Certificate
			out.Keys = append([]StationKey{k}, out.Keys...)
		} else {
			out.Keys = append(out.Keys, k)
		}
	}
	return out
}

// NextChange is the next time after now a scheduled station key starts to
// sign, or the zero time.
func (st Station) NextChange(now time.Time) time.Time {
	var next time.Time
	for _, k := range st.Keys {
		if k.NotBeforeUse.After(now) && (next.IsZero() || k.NotBeforeUse.Before(next)) {
			next = k.NotBeforeUse
		}
	}
	return next
}

// stations is every station of f, Station first.
func (f *File) stations() []Station {
	if len(f.Stations) == 0 && f.Station.AS2ID != "" {
		return []Station{f.Station}
	}
	return f.Stations
}

// StationByID returns the station whose AS2 ID is id, or false.
func (f *File) StationByID(id string) (*Station, bool) {
	sts := f.stations()
	for i := range sts {
		if sts[i].AS2ID == id {
			return &sts[i], true
		}
	}
	return nil, false
}

// StationOf returns the station partner p trades with: its Station, else
// the first.
func (f *File) StationOf(p *Partner) *Station {
	if st, ok := f.StationByID(p.Station); ok {
		return st
	}
	return &f.Station
}

// NextChange is the next time after now that a scheduled station key of
// f starts to sign, or the zero time: then the stations must be taken At
// that time again.
func (f *File) NextChange(now time.Time) time.Time {
	var next time.Time
	for _, st := range f.stations() {
		if t := st.NextChange(now); !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	return next
}

// At returns a copy of f whose stations are taken At now.
func (f *File) At(now time.Time) *File {
	g := *f
	g.Stations = make([]Station, len(f.stations()))
	for i, st := range f.stations() {
		g.Stations[i] = st.At(now)
	}
	if len(g.Stations) > 0 {
		g.Station = g.Stations[0]
	}
	return &g
}
