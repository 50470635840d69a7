package cms

import (
	"encoding/asn1"
	"testing"
	"time"
)

// TestSigningTime: signingTime reads what asn1.Unmarshal reads, the
// usual UTCTime and every other form.
func TestSigningTime(t *testing.T) {
	var in [][]byte
	for _, tm := range []time.Time{
		time.Date(2026, 3, 1, 12, 0, 5, 0, time.UTC), time.Date(1950, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2049, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(1999, 2, 28, 1, 2, 3, 0, time.UTC), time.Date(2000, 2, 29, 1, 2, 3, 0, time.UTC), time.Date(1960, 2, 29, 0, 0, 0, 0, time.UTC),
		time.Date(2050, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1949, 12, 31, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 1, 12, 0, 5, 0, time.FixedZone("", 3600)),
	} {
		b, err := asn1.Marshal(tm)
		if err != nil {
			t.Fatal(err)
		}
		in = append(in, b)
	}
	for _, s := range []string{"260229120000Z", "261301120000Z", "260100120000Z", "260431120000Z", "260101240000Z", "260101126000Z", "260101120060Z",
		"2601011200Z", "260101120000+0100", "26010112000aZ", "260101120000z", " 60101120000Z", "000229000000Z", "500229000000Z", "520229000000Z"} {
		in = append(in, append([]byte{asn1.TagUTCTime, byte(len(s))}, s...))
	}
	in = append(in, []byte{asn1.TagUTCTime, 13}, []byte{}, []byte{0x31, 0}, append([]byte{asn1.TagUTCTime, 13}, "260101120000Z\x00\x00"...))
	for _, b := range in {
		var want time.Time
		_, err := asn1.Unmarshal(b, &want)
		got, ok := signingTime(b)
		if ok != (err == nil) || ok && (!got.Equal(want) || got.Location().String() != want.Location().String()) {
			t.Errorf("signingTime(%q) = %v, %v; asn1 %v, %v", b, got, ok, want, err)
		}
	}
}

func FuzzSigningTime(f *testing.F) {
	f.Add([]byte("\x17\x0d260101120000Z"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var want time.Time
		_, err := asn1.Unmarshal(b, &want)
		got, ok := signingTime(b)
		if ok != (err == nil) || ok && (!got.Equal(want) || got.Location().String() != want.Location().String()) {
			t.Fatalf("signingTime(%q) = %v, %v; asn1 %v, %v", b, got, ok, want, err)
		}
	})
}
