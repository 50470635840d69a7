package config

import (
	"testing"
	"time"
)

func TestLoadEDIErrors(t *testing.T) {
	tests := []errorCase{
		{name: "x12 ack", give: acmeWith("edi_x12_ack: 855"), wantField: "partners[0].edi_x12_ack", wantLine: 6, wantMsg: `"855" is not an X12 acknowledgement`},
		{name: "duplicates", give: acmeWith("edi_duplicates: drop"), wantField: "partners[0].edi_duplicates", wantLine: 6, wantMsg: `"drop" is not flag or refuse`},
		{name: "ack due without unit", give: acmeWith("edi_ack_due: 4"), wantField: "partners[0].edi_ack_due", wantMsg: "like 4h"},
		{name: "ack due negative", give: acmeWith("edi_ack_due: -1h"), wantField: "partners[0].edi_ack_due", wantMsg: "not a duration"},
		{name: "duplicate window", give: acmeWith("edi_duplicate_window: forever"), wantField: "partners[0].edi_duplicate_window", wantMsg: "like 720h"},
	}
	runErrorCases(t, tests)
}

func TestLoadEDI(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want EDISettings
	}{
		{"defaults", nil, EDISettings{X12Ack: "997", DuplicateWindow: DefaultEDIDuplicateWindow}},
		{"all set", []string{"edi_acks: true", "edi_x12_ack: 999", "edi_ack_due: 4h", "edi_duplicates: refuse", "edi_duplicate_window: 48h"},
			EDISettings{Acks: true, X12Ack: "999", AckDue: 4 * time.Hour, RefuseDuplicates: true, DuplicateWindow: 48 * time.Hour}},
		{"flag, check off", []string{"edi_duplicates: flag", "edi_duplicate_window: 0s"}, EDISettings{X12Ack: "997"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := newFixture(t).load(acmeWith(tt.give...))
			if err != nil {
				t.Fatalf("Load = %v", err)
			}
			p, _ := f.Partner("ACME CORP")
			if p.EDI != tt.want {
				t.Errorf("Load: EDI = %+v, want %+v", p.EDI, tt.want)
			}
		})
	}
}
