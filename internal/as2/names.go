package as2

import (
	"crypto"
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidName means an AS2-From or AS2-To value is not an RFC 4130 name.
var ErrInvalidName = errors.New("as2: invalid AS2 name")

// ErrUnsupportedMICAlg means a MIC algorithm name is unknown or not
// supported (md5 is refused).
var ErrUnsupportedMICAlg = errors.New("as2: unsupported MIC algorithm")

// ParseAS2Name returns the AS2 name in an AS2-From or AS2-To header value:
// surrounding whitespace is dropped and a quoted-string is unquoted (RFC
// 4130 §6.2). Unquoted values with spaces, which some products send, are
// taken literally. The result is 1 to 128 printable ASCII characters and
// must be compared case-sensitively. Errors wrap ErrInvalidName.
func ParseAS2Name(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		in := v[1 : len(v)-1]
		if strings.IndexAny(in, `"\`) < 0 {
			// Nothing escaped: the name is the quotes' content.
			if err := validateAS2Name(in); err != nil {
				return "", err
			}
			return in, nil
		}
		var b strings.Builder
		b.Grow(len(in))
		for i := 0; i < len(in); i++ {
			c := in[i]
			if c == '\\' && i+1 < len(in) {
				i++
				c = in[i]
			} else if c == '"' {
				return "", fmt.Errorf("%w: unescaped quote in %q", ErrInvalidName, v)
			}
			b.WriteByte(c)
		}
		v = b.String()
	}
	if err := validateAS2Name(v); err != nil {
		return "", err
	}
	return v, nil
}

func validateAS2Name(v string) error {
	if len(v) < 1 || len(v) > 128 {
		return fmt.Errorf("%w: length %d, want 1 to 128", ErrInvalidName, len(v))
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return fmt.Errorf("%w: byte 0x%02x at %d", ErrInvalidName, v[i], i)
		}
	}
	return nil
}

// FormatAS2Name returns name as an AS2-From/AS2-To header value: quoted
// (with \" and \\ escapes) only when it holds a space, '"' or '\'. Errors
// wrap ErrInvalidName.
func FormatAS2Name(name string) (string, error) {
	if err := validateAS2Name(name); err != nil {
		return "", err
	}
	if !strings.ContainsAny(name, " \"\\") {
		return name, nil
	}
	var b strings.Builder
	b.Grow(len(name) + 2 + strings.Count(name, `"`) + strings.Count(name, `\`))
	b.WriteByte('"')
	for i := 0; i < len(name); i++ {
		if name[i] == '"' || name[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(name[i])
	}
	b.WriteByte('"')
	return b.String(), nil
}

// ParseMICAlg parses a MIC or micalg algorithm name leniently: case,
// dashes and an "rsa-" prefix are ignored, so "sha1", "SHA-1",
// "rsa-sha1", "sha256" and "sha-256" are all accepted. Errors wrap
// ErrUnsupportedMICAlg.
func ParseMICAlg(s string) (crypto.Hash, error) {
	switch s { // the usual spellings, as the normalisation below reads them
	case "sha-256", "sha256":
		return crypto.SHA256, nil
	case "sha-1", "sha1":
		return crypto.SHA1, nil
	}
	n := strings.ToLower(strings.Trim(s, " \t\""))
	n = strings.TrimPrefix(n, "rsa-")
	n = strings.ReplaceAll(strings.ReplaceAll(n, "-", ""), "_", "")
	switch n {
	case "sha1":
		return crypto.SHA1, nil
	case "sha224":
		return crypto.SHA224, nil
	case "sha256":
		return crypto.SHA256, nil
	case "sha384":
		return crypto.SHA384, nil
	case "sha512":
		return crypto.SHA512, nil
	}
	return 0, fmt.Errorf("%w: %q", ErrUnsupportedMICAlg, s)
}

// MICAlgName returns the RFC 5751 name of h ("sha-256"), or "" for an
// unsupported hash.
func MICAlgName(h crypto.Hash) string {
	switch h {
	case crypto.SHA1:
		return "sha-1"
	case crypto.SHA224:
		return "sha-224"
	case crypto.SHA256:
		return "sha-256"
	case crypto.SHA384:
		return "sha-384"
	case crypto.SHA512:
		return "sha-512"
	}
	return ""
}

// MICAlgNameRFC3851 returns the RFC 3851 name of h ("sha256"), the
// spelling S/MIME used before RFC 5751, or "" for an unsupported hash.
// Some older receivers know only these names.
func MICAlgNameRFC3851(h crypto.Hash) string {
	return strings.ReplaceAll(MICAlgName(h), "-", "")
}

// DispositionOptions is a parsed Disposition-Notification-Options header:
//
//	signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, sha-256, sha-1
type DispositionOptions struct {
	// ProtocolImportance is "required", "optional" or "" (absent).
	ProtocolImportance string
	// Protocols lists the signed-receipt-protocol values, lower-cased.
	Protocols []string
	// MICAlgImportance is "required", "optional" or "" (absent).
	MICAlgImportance string
	// MICAlgs lists the signed-receipt-micalg values as sent, trimmed, in
	// the partner's order of preference.
	MICAlgs []string
}

// ParseDispositionOptions parses a Disposition-Notification-Options value,
// tolerating odd whitespace, case, quotes and a missing importance.
// Unknown parameters are ignored; a parameter without '=' is reported as
// an error after the rest was parsed.
func ParseDispositionOptions(v string) (DispositionOptions, error) {
	var o DispositionOptions
	var bad error
	for param := range strings.SplitSeq(v, ";") {
		param = strings.TrimSpace(param)
		if param == "" {
			continue
		}
		name, value, ok := strings.Cut(param, "=")
		if !ok {
			bad = fmt.Errorf("as2: disposition-notification-options parameter %q without '='", param)
			continue
		}
		var importance string
		var values []string
		i := -1
		for item := range strings.SplitSeq(value, ",") {
			i++
			item = strings.Trim(strings.TrimSpace(item), "\"")
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			if l := strings.ToLower(item); i == 0 && (l == "optional" || l == "required") {
				importance = l
				continue
			}
			values = append(values, item)
		}
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "signed-receipt-protocol":
			o.ProtocolImportance = importance
			for _, p := range values {
				o.Protocols = append(o.Protocols, strings.ToLower(p))
			}
		case "signed-receipt-micalg":
			o.MICAlgImportance = importance
			o.MICAlgs = values
		}
	}
	return o, bad
}

// SignedReceipt reports whether a signed receipt (pkcs7-signature) was
// requested.
func (o DispositionOptions) SignedReceipt() bool {
	for _, p := range o.Protocols {
		if p == "pkcs7-signature" || p == "application/pkcs7-signature" {
			return true
		}
	}
	return false
}

// SupportedMICAlgs returns the requested MIC algorithms this package
// supports, in the partner's order.
func (o DispositionOptions) SupportedMICAlgs() []crypto.Hash {
	var hs []crypto.Hash
	for _, a := range o.MICAlgs {
		if h, err := ParseMICAlg(a); err == nil {
			hs = append(hs, h)
		}
	}
	return hs
}

// MICAlg returns the first requested MIC algorithm that is supported; ok
// is false when none is (the MDN then reports "failed/Failure: unsupported
// MIC-algorithms" if MICAlgImportance is "required").
func (o DispositionOptions) MICAlg() (h crypto.Hash, ok bool) {
	if hs := o.SupportedMICAlgs(); len(hs) > 0 {
		return hs[0], true
	}
	return 0, false
}
