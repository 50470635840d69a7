package connector

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// order is a received X12 purchase order with every field set.
var order = Document{
	ID:          4711,
	MessageID:   "20260301-0001@edihub.acme.example",
	Partner:     "ACME CORP",
	Station:     "EDIHUB",
	Direction:   "inbound",
	Standard:    "x12",
	Type:        "850",
	GroupType:   "PO",
	ICN:         "000000042",
	ContentType: "application/edi-x12",
	FileName:    "po-42.x12",
	MIC:         "dGVzdA==, sha-256",
	Size:        1234,
	Time:        time.Date(2026, 3, 1, 23, 30, 5, 0, time.FixedZone("CET", 3600)),
}

func TestParseTemplate(t *testing.T) {
	tests := []struct {
		give string
		want string // a part of the error; "" when the template is valid
	}{
		{give: DefaultTemplate},
		{give: "{id}"},
		{give: "in/{message_id}.edi"},
		{give: "{partner}-{station}/{type}_{group}/{standard}.{direction}.{hh}{min}{ss}.{filename}.{id}"},
		{give: "", want: "empty"},
		{give: "{partner}/{icn}.edi", want: "neither {id} nor {message_id}"},
		{give: "/abs/{id}", want: "starts with /"},
		{give: "a//{id}", want: "empty, . or .. segment"},
		{give: "{id}/", want: "empty, . or .. segment"},
		{give: "../{id}", want: "empty, . or .. segment"},
		{give: "a/./{id}", want: "empty, . or .. segment"},
		{give: `a\{id}`, want: "control character or one of"},
		{give: "a:{id}", want: "control character or one of"},
		{give: "a\x00{id}", want: "control character or one of"},
		{give: "{id}\xff", want: "not UTF-8"},
		{give: "{id}{partnr}", want: "unknown placeholder {partnr}; valid: {dd}, {direction}, {ext}, {filename}, {group}, {hh}, {icn}, {id}, {message_id}, {min}, {mm}, {partner}, {ss}, {standard}, {station}, {type}, {yyyy}"},
		{give: "{id}{}", want: "unknown placeholder {}"},
		{give: "{id", want: "a { without its }"},
		{give: "{id}{{partner}", want: "a { without its }"},
		{give: "{id}}", want: "a } without its {"},
		{give: "{id}" + strings.Repeat("a", 600), want: "at most 512"},
	}
	for _, tt := range tests {
		_, err := ParseTemplate(tt.give)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("ParseTemplate(%q) = %v, want no error", tt.give, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("ParseTemplate(%q) = %v, want an error with %q", tt.give, err, tt.want)
		case tt.want != "" && !errors.Is(err, ErrTemplate):
			t.Errorf("ParseTemplate(%q) = %v, want ErrTemplate", tt.give, err)
		}
	}
}

func TestTemplateExpand(t *testing.T) {
	bare := Document{ID: 7, MessageID: "m7", ContentType: "application/octet-stream"}
	tests := []struct {
		give string
		doc  Document
		want string
	}{
		{give: DefaultTemplate, doc: order, want: "ACME CORP/2026/03/01/000000042-20260301-0001@edihub.acme.example.edi"},
		{give: "{yyyy}{mm}{dd}T{hh}{min}{ss}-{id}", doc: order, want: "20260301T223005-4711"},
		{give: "{station}/{direction}/{standard}/{type}/{group}/{filename}-{id}.{ext}", doc: order, want: "EDIHUB/inbound/x12/850/PO/po-42.x12-4711.edi"},
		{give: DefaultTemplate, doc: bare, want: "none/none/none/none/none-m7.bin"},
		{give: "{filename}-{id}", doc: Document{ID: 1, FileName: `C:\Users\a\..\secret.txt`}, want: "secret.txt-1"},
		{give: "{partner}/{id}", doc: Document{ID: 1, Partner: "../../etc"}, want: "_._.._etc/1"},
		{give: "{partner}/{id}", doc: Document{ID: 1, Partner: ".."}, want: "__/1"},
		{give: "{partner}/{id}", doc: Document{ID: 1, Partner: ".hidden"}, want: "_hidden/1"},
		{give: "{partner}/{id}", doc: Document{ID: 1, Partner: `a<b>c:d"e|f?g*h`}, want: "a_b_c_d_e_f_g_h/1"},
		{give: "{partner}/{id}", doc: Document{ID: 1, Partner: "tab\there\x7f\u202e"}, want: "tab_here__/1"},
		{give: "{partner}/{id}", doc: Document{ID: 1, Partner: "bad\xffutf8"}, want: "bad_utf8/1"},
		{give: "{partner}/{id}", doc: Document{ID: 1, Partner: "trailing. "}, want: "trailing__/1"},
		{give: "{partner}/{id}", doc: Document{ID: 1, Partner: "nul"}, want: "_nul/1"},
		{give: "{partner}/{id}", doc: Document{ID: 1, Partner: "COM1.txt"}, want: "_COM1.txt/1"},
		{give: "{partner}/{id}", doc: Document{ID: 1, Partner: "Ünïcödé"}, want: "Ünïcödé/1"},
		{give: "{message_id}.{ext}", doc: Document{MessageID: strings.Repeat("m", 300), ContentType: "application/json"},
			want: strings.Repeat("m", 200-13-5) + "~f790db24fa9f.json"},
	}
	for _, tt := range tests {
		tmpl, err := ParseTemplate(tt.give)
		if err != nil {
			t.Fatalf("ParseTemplate(%q) = %v", tt.give, err)
		}
		got, err := tmpl.Expand(tt.doc)
		if err != nil || got != tt.want {
			t.Errorf("ParseTemplate(%q).Expand(%+v) = %q, %v, want %q", tt.give, tt.doc, got, err, tt.want)
		}
	}
}

func TestZeroTemplateExpandsDefault(t *testing.T) {
	var zero Template
	got, err := zero.Expand(order)
	want := "ACME CORP/2026/03/01/000000042-20260301-0001@edihub.acme.example.edi"
	if err != nil || got != want {
		t.Errorf("Template{}.Expand(order) = %q, %v, want %q", got, err, want)
	}
	if zero.String() != DefaultTemplate {
		t.Errorf("Template{}.String() = %q, want %q", zero.String(), DefaultTemplate)
	}
}

func TestExpandLongSegmentsStayDistinct(t *testing.T) {
	tmpl, err := ParseTemplate("{message_id}")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 150) // 300 bytes
	a, _ := tmpl.Expand(Document{MessageID: long + "a"})
	b, _ := tmpl.Expand(Document{MessageID: long + "b"})
	if a == b || len(a) > MaxSegment || !utf8.ValidString(a) {
		t.Errorf("Expand of two long message ids = %q (%d bytes) and %q, want distinct valid UTF-8 of at most %d bytes", a, len(a), b, MaxSegment)
	}
}

func TestExt(t *testing.T) {
	tests := []struct {
		give Document
		want string
	}{
		{give: Document{Standard: "edifact", ContentType: "application/octet-stream"}, want: "edi"},
		{give: Document{ContentType: "application/EDI-X12"}, want: "edi"},
		{give: Document{ContentType: "application/edifact"}, want: "edi"},
		{give: Document{ContentType: "application/edi-consent; charset=utf-8"}, want: "edi"},
		{give: Document{ContentType: "application/xml"}, want: "xml"},
		{give: Document{ContentType: "application/soap+xml"}, want: "xml"},
		{give: Document{ContentType: "text/xml"}, want: "xml"},
		{give: Document{ContentType: "application/json"}, want: "json"},
		{give: Document{ContentType: "text/plain"}, want: "txt"},
		{give: Document{ContentType: "application/pdf"}, want: "pdf"},
		{give: Document{ContentType: "application/octet-stream", FileName: "INVOICE.CSV"}, want: "csv"},
		{give: Document{ContentType: "application/octet-stream", FileName: "a.tar.gz"}, want: "gz"},
		{give: Document{ContentType: "application/octet-stream", FileName: "a.b@d"}, want: "bin"},
		{give: Document{ContentType: "application/octet-stream", FileName: "a.verylongextension"}, want: "bin"},
		{give: Document{}, want: "bin"},
	}
	for _, tt := range tests {
		if got := Ext(tt.give); got != tt.want {
			t.Errorf("Ext(%+v) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

// FuzzTemplate checks that no template and no document values make a
// name that escapes the destination's root or that some destination
// cannot hold.
func FuzzTemplate(f *testing.F) {
	f.Add(DefaultTemplate, "ACME", "msg@x", "000000001", "application/edi-x12", "po.x12")
	f.Add("{partner}/{filename}-{id}", "../..", "..", "/etc/passwd", "text/plain", `..\..\x`)
	f.Fuzz(func(t *testing.T, tmplText, partner, messageID, icn, contentType, fileName string) {
		tmpl, err := ParseTemplate(tmplText)
		if err != nil {
			return
		}
		doc := Document{ID: 1, Partner: partner, MessageID: messageID, ICN: icn, ContentType: contentType,
			FileName: fileName, Station: partner, Type: icn, Time: time.Unix(int64(len(partner))*1e7, 0)}
		name, err := tmpl.Expand(doc)
		if err != nil {
			t.Fatalf("ParseTemplate(%q).Expand = %v", tmplText, err)
		}
		if !utf8.ValidString(name) || strings.HasPrefix(name, "/") {
			t.Fatalf("ParseTemplate(%q).Expand = %q, not valid UTF-8 or absolute", tmplText, name)
		}
		for seg := range strings.SplitSeq(name, "/") {
			if seg == "" || seg == "." || seg == ".." || strings.HasPrefix(seg, ".") || len(seg) > MaxSegment ||
				strings.ContainsFunc(seg, func(r rune) bool { return strings.ContainsRune(`\<>:"|?*`, r) || unsafeRune(r) }) {
				t.Fatalf("ParseTemplate(%q).Expand = %q, segment %q is not safe", tmplText, name, seg)
			}
		}
		again, _ := tmpl.Expand(doc)
		if again != name {
			t.Fatalf("ParseTemplate(%q).Expand twice = %q and %q, want the same name", tmplText, name, again)
		}
	})
}
