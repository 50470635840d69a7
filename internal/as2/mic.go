package as2

import (
	"bytes"
	"crypto"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// ErrMalformedMIC means a Received-content-MIC value could not be parsed.
var ErrMalformedMIC = errors.New("as2: malformed MIC")

// MIC is a message integrity check value: a digest and its algorithm.
type MIC struct {
	Alg    crypto.Hash
	Digest []byte
}

// ComputeMIC digests b with alg. alg must be available (SHA-1 and SHA-2
// are linked in by the cms package).
func ComputeMIC(alg crypto.Hash, b []byte) MIC {
	h := alg.New()
	h.Write(b)
	return MIC{Alg: alg, Digest: h.Sum(nil)}
}

// MICAlgorithms are the MIC algorithms edihub computes and accepts, in
// the order RFC 5751 names them.
var MICAlgorithms = []crypto.Hash{crypto.SHA1, crypto.SHA224, crypto.SHA256, crypto.SHA384, crypto.SHA512}

// ComputeMICs digests b with every algorithm of MICAlgorithms, in that
// order. (One pass in cache-sized blocks measured no faster than five.)
func ComputeMICs(b []byte) []MIC {
	mics := make([]MIC, len(MICAlgorithms))
	for i, alg := range MICAlgorithms {
		mics[i] = ComputeMIC(alg, b)
	}
	return mics
}

// FindMIC returns the MIC of mics computed with alg; ok is false when
// none is.
func FindMIC(mics []MIC, alg crypto.Hash) (m MIC, ok bool) {
	for _, m := range mics {
		if m.Alg == alg {
			return m, true
		}
	}
	return MIC{}, false
}

// String returns the Received-content-MIC form: "base64, sha-256".
func (m MIC) String() string {
	if m.Alg == 0 {
		return ""
	}
	return base64.StdEncoding.EncodeToString(m.Digest) + ", " + MICAlgName(m.Alg)
}

// IsZero reports whether m holds no MIC.
func (m MIC) IsZero() bool { return m.Alg == 0 && m.Digest == nil }

// Equal reports whether m and o have the same algorithm and digest.
func (m MIC) Equal(o MIC) bool {
	return m.Alg == o.Alg && bytes.Equal(m.Digest, o.Digest)
}

// ParseMIC parses a Received-content-MIC value leniently about format:
// whitespace and line folding inside the value, base64 with or without
// padding, any algorithm spelling ParseMICAlg accepts. An absent algorithm
// is an error, never guessed. Errors wrap ErrMalformedMIC or
// ErrUnsupportedMICAlg.
func ParseMIC(s string) (MIC, error) {
	digest, alg, ok := strings.Cut(s, ",")
	if !ok {
		return MIC{}, fmt.Errorf("%w: no algorithm in %q", ErrMalformedMIC, s)
	}
	h, err := ParseMICAlg(alg)
	if err != nil {
		return MIC{}, err
	}
	d, err := decodeBase64([]byte(digest))
	if err != nil {
		return MIC{}, fmt.Errorf("%w: %w", ErrMalformedMIC, err)
	}
	if len(d) != h.Size() {
		return MIC{}, fmt.Errorf("%w: %d digest bytes for %s", ErrMalformedMIC, len(d), MICAlgName(h))
	}
	return MIC{Alg: h, Digest: d}, nil
}

// MICMatches reports whether a MIC returned by a partner (any format
// ParseMIC accepts) equals want, value and algorithm alike.
func MICMatches(returned string, want MIC) bool {
	got, err := ParseMIC(returned)
	return err == nil && got.Equal(want)
}
