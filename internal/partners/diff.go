package partners

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"sort"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/edihub/edihub/internal/config"
)

// Diff describes the change from one profile to another, one line per key
// that differs, in key order: "+ key: value" (added), "- key: value"
// (removed), "~ key: old → new" (changed). Nested keys are written with
// dots (tls.ca_file, headers.X-Partner-Key). PEM values are summarised by
// their certificates' subjects, serials, expiry and fingerprints, so that
// a certificate renewal reads as one. old or new may be nil (a create, a
// delete); equal profiles give "".
func Diff(old, new *config.PartnerSpec) string {
	a, b := flatten(old), flatten(new)
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out strings.Builder
	for _, k := range keys {
		av, inA := a[k]
		bv, inB := b[k]
		switch {
		case inA && !inB:
			fmt.Fprintf(&out, "- %s: %s\n", k, av)
		case !inA && inB:
			fmt.Fprintf(&out, "+ %s: %s\n", k, bv)
		case av != bv:
			fmt.Fprintf(&out, "~ %s: %s → %s\n", k, av, bv)
		}
	}
	return out.String()
}

// flatten maps each key path of spec to its value as written in the diff.
func flatten(spec *config.PartnerSpec) map[string]string {
	out := map[string]string{}
	if spec == nil {
		return out
	}
	data, err := yaml.Marshal(spec)
	if err != nil {
		return out
	}
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		return out
	}
	flattenInto(out, "", m)
	return out
}

func flattenInto(out map[string]string, prefix string, v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			flattenInto(out, p, e)
		}
	case []any:
		parts := make([]string, 0, len(x))
		for i, e := range x {
			if _, ok := e.(map[string]any); ok {
				flattenInto(out, fmt.Sprintf("%s[%d]", prefix, i), e)
				continue
			}
			parts = append(parts, fmt.Sprint(e))
		}
		if len(parts) > 0 {
			out[prefix] = "[" + strings.Join(parts, ", ") + "]"
		}
	case string:
		if config.IsInlinePEM(x) {
			out[prefix] = DescribePEM(x)
			return
		}
		out[prefix] = fmt.Sprintf("%q", x)
	default:
		out[prefix] = fmt.Sprint(x)
	}
}

// DescribePEM summarises PEM certificates for people: subject, serial,
// expiry and the start of the SHA-256 fingerprint of each.
func DescribePEM(text string) string {
	var parts []string
	rest := []byte(text)
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			parts = append(parts, block.Type)
			continue
		}
		sum := sha256.Sum256(c.Raw)
		parts = append(parts, fmt.Sprintf("certificate %q serial %s until %s sha256:%s", c.Subject.CommonName, c.SerialNumber.Text(16),
			c.NotAfter.UTC().Format("2006-01-02"), hex.EncodeToString(sum[:8])))
	}
	if len(parts) == 0 {
		return "(PEM without a certificate)"
	}
	return "[" + strings.Join(parts, "; ") + "]"
}
