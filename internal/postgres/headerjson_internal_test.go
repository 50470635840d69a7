package postgres

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
)

// TestHeaderJSON: headerJSON writes what json.Marshal writes.
func TestHeaderJSON(t *testing.T) {
	for _, h := range []http.Header{
		nil, {}, {"A": nil}, {"A": {}}, {"A": {""}},
		{"Content-Type": {`multipart/signed; protocol="application/pkcs7-signature"; micalg=sha-256; boundary="----=_MDN_0a"`},
			"Mime-Version": {"1.0"}, "As2-From": {`"EDIHUB HUB"`}, "As2-To": {`Q \"Quoted\" \\ Co`}, "Message-Id": {"<edihub-01@EDIHUB>"},
			"Date": {"Sun, 01 Mar 2026 12:00:00 +0000"}, "EDIINT-Features": {"multiple-attachments, CEM"}, "X-Amp": {"a&b", "c"}},
		{"Ä": {"x"}}, {"A": {"\u2028"}}, {"A": {"\x00\x1f\x7f"}}, {"A": {"\xff"}}, {"b": {"1"}, "B": {"2"}, "a": {"3"}},
	} {
		want, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		got, err := headerJSON(h)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("headerJSON(%q) = %s, %v; want %s", h, got, err, want)
		}
	}
}

// TestHeaderJSONAllocations: the MDN's header fields are encoded into one
// buffer (json.Marshal's reflection took some 30 objects), the sorted
// keys aside.
func TestHeaderJSONAllocations(t *testing.T) {
	h := http.Header{"Content-Type": {"multipart/signed; boundary=x"}, "Mime-Version": {"1.0"}, "As2-From": {"A"}, "As2-To": {"B"},
		"Message-Id": {"<1@x>"}, "Date": {"Sun, 01 Mar 2026 12:00:00 +0000"}, "Subject": {"MDN"}, "EDIINT-Features": {"CEM"}}
	if got := testing.AllocsPerRun(100, func() { _, _ = headerJSON(h) }); got > 2 {
		t.Errorf("headerJSON: %.0f allocations, want at most 2", got)
	}
}

func FuzzHeaderJSON(f *testing.F) {
	f.Add("Message-Id", "<a@b>", "As2-To", `"x \" y"`)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		h := http.Header{k1: {v1, v2}, k2: {v2}}
		want, _ := json.Marshal(h)
		got, err := headerJSON(h)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("headerJSON(%q) = %s, %v; want %s", h, got, err, want)
		}
	})
}
