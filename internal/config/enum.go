package config

import (
	"fmt"
	"strings"
)

// enum is one set of accepted names. Input is matched case-insensitively,
// after trimming spaces, against the canonical names and a few common
// alternative spellings, and normalised to the canonical name.
type enum struct {
	what      string            // for messages: "signing digest"
	canonical []string          // listed in errors, in this order
	aliases   map[string]string // lower-case alternative → canonical
	rejected  map[string]string // lower-case name → why it is refused
}

var (
	signEnum = enum{
		what:      "signing digest",
		canonical: []string{DigestSHA256, DigestSHA384, DigestSHA512, ""},
		aliases:   map[string]string{"sha256": DigestSHA256, "sha384": DigestSHA384, "sha512": DigestSHA512, "none": ""},
		rejected: map[string]string{
			DigestSHA1: "SHA-1 is not offered for outbound signatures",
			"sha1":     "SHA-1 is not offered for outbound signatures",
		},
	}
	micalgEnum = enum{
		what:      "MDN micalg",
		canonical: []string{DigestSHA256, DigestSHA384, DigestSHA512, DigestSHA1},
		aliases:   map[string]string{"sha256": DigestSHA256, "sha384": DigestSHA384, "sha512": DigestSHA512, "sha1": DigestSHA1},
	}
	encryptEnum = enum{
		what:      "cipher",
		canonical: []string{CipherAES128CBC, CipherAES192CBC, CipherAES256CBC, Cipher3DES, CipherAES128GCM, CipherAES256GCM, ""},
		aliases: map[string]string{
			"aes-128-cbc": CipherAES128CBC, "aes-192-cbc": CipherAES192CBC, "aes-256-cbc": CipherAES256CBC,
			"des-ede3-cbc": Cipher3DES, "aes-128-gcm": CipherAES128GCM, "aes-256-gcm": CipherAES256GCM,
			"none": "",
		},
	}
	mdnEnum = enum{
		what:      "MDN mode",
		canonical: []string{MDNSync, MDNAsync, MDNNone},
	}
	keyEncryptionEnum = enum{
		what:      "key encryption",
		canonical: []string{KeyEncryptionPKCS1v15, KeyEncryptionOAEPSHA1, KeyEncryptionOAEPSHA256, KeyEncryptionOAEPSHA384, KeyEncryptionOAEPSHA512},
	}
	transferEncodingEnum = enum{
		what:      "transfer encoding",
		canonical: []string{TransferEncodingBinary, TransferEncodingBase64},
	}
	compressOrderEnum = enum{
		what:      "compression order",
		canonical: []string{CompressBeforeSigning, CompressAfterSigning},
	}
	micalgNamesEnum = enum{
		what:      "micalg spelling",
		canonical: []string{MICAlgNamesRFC5751, MICAlgNamesRFC3851},
	}
)

// lookup normalises s, reporting false when it is not accepted.
func (e enum) lookup(s string) (string, bool) {
	k := strings.ToLower(strings.TrimSpace(s))
	for _, c := range e.canonical {
		if k == c {
			return c, true
		}
	}
	c, ok := e.aliases[k]
	return c, ok
}

// list names the accepted values for an error's fix.
func (e enum) list() string {
	var names []string
	empty := false
	for _, c := range e.canonical {
		if c == "" {
			empty = true
			continue
		}
		names = append(names, c)
	}
	s := strings.Join(names, ", ")
	if empty {
		s += `, or "" (none)`
	}
	return s
}

// enum validates a value for field; an empty input yields dflt. A dflt of ""
// means the empty value is itself a choice ("none").
func (p *parser) enum(field, in string, e enum, dflt string) (string, error) {
	if strings.TrimSpace(in) == "" {
		return dflt, nil
	}
	if v, ok := e.lookup(in); ok {
		return v, nil
	}
	msg := fmt.Sprintf("unsupported %s %q", e.what, in)
	if why, ok := e.rejected[strings.ToLower(strings.TrimSpace(in))]; ok {
		msg += ": " + why
	}
	return "", p.fail(field, msg, "use one of "+e.list())
}
