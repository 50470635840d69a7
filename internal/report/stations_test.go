package report_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/report"
)

// TestRenderStations: a hub of several stations names them all in the
// title and each partner's station in its row of the text, the HTML and
// the CSV; a hub of one station (or none given) shows no station per
// partner, the report exactly as before.
func TestRenderStations(t *testing.T) {
	day, d := sampleDay(t)
	st := newSeededStore(t, standardSeed(d))
	partners := []string{"ACME CORP", "GLOBEX", "INITECH", "UMBRELLA"}
	stationOf := map[string]string{"ACME CORP": "EDIHUB B", "GLOBEX": "EDIHUB", "INITECH": "EDIHUB", "UMBRELLA": "EDIHUB B"}
	build := func(stations func() ([]string, func(string) string)) *report.Report {
		t.Helper()
		b := &report.Builder{Source: st, Station: "EDIHUB", Lease: testLease, Partners: partners, Stations: stations,
			Now: func() time.Time { return d.AddDate(0, 0, 1).Add(15 * time.Minute) }}
		r, err := b.Build(context.Background(), day)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	type rendered struct{ text, html, csv []byte }
	render := func(r *report.Report) rendered {
		t.Helper()
		doc, err := report.HTML(r, report.Images{Volume: "cid:v", Partners: "cid:p"})
		if err != nil {
			t.Fatal(err)
		}
		c, err := report.CSV(r)
		if err != nil {
			t.Fatal(err)
		}
		return rendered{text: report.Text(r), html: textContent(doc), csv: c}
	}
	csvPartners := func(c []byte) []string {
		t.Helper()
		recs, err := csv.NewReader(bytes.NewReader(c)).ReadAll()
		if err != nil {
			t.Fatalf("CSV: %v", err)
		}
		var out []string
		for _, rec := range recs[1:] {
			out = append(out, rec[1])
		}
		return out
	}

	two := build(func() ([]string, func(string) string) {
		return []string{"EDIHUB", "EDIHUB B"}, func(p string) string { return stationOf[p] }
	})
	if two.Station != "EDIHUB, EDIHUB B" || !strings.Contains(two.Title(), "EDIHUB, EDIHUB B") {
		t.Errorf("two stations: Station = %q, Title() = %q; want both stations named", two.Station, two.Title())
	}
	for _, p := range []report.Period{two.Period, two.DayBefore, two.WeekBefore} {
		for _, q := range p.Partners {
			if q.Station != stationOf[q.Name] {
				t.Errorf("two stations: partner %s Station = %q, want %q", q.Name, q.Station, stationOf[q.Name])
			}
		}
	}
	got := render(two)
	wantCSV := []string{"ACME CORP → EDIHUB B", "GLOBEX → EDIHUB", "INITECH → EDIHUB", "UMBRELLA → EDIHUB B", "(all partners)"}
	if diff := cmp.Diff(wantCSV, csvPartners(got.csv)); diff != "" {
		t.Errorf("two stations: CSV partner column (-want +got):\n%s", diff)
	}
	for _, p := range partners {
		row := p + " → " + stationOf[p]
		if !bytes.Contains(got.text, []byte("\n"+row+"\n")) {
			t.Errorf("two stations: Text has no partner row %q:\n%s", row, got.text)
		}
		if !bytes.Contains(got.html, []byte(row)) {
			t.Errorf("two stations: HTML has no partner row %q:\n%s", row, got.html)
		}
	}
	// The figures are the same partner's: the station only labels it.
	if a, b := two.Partners[0].Figures, two.Period.Partner("ACME CORP"); a.Received == 0 || a.Received != b.Received {
		t.Errorf("two stations: ACME CORP received %d, Partner(ACME CORP) %d; want the same, non-zero", a.Received, b.Received)
	}
	j, err := report.JSON(two)
	if err != nil {
		t.Fatal(err)
	}
	back, err := report.FromJSON(j)
	if err != nil {
		t.Fatal(err)
	}
	if again := render(back); !bytes.Equal(again.text, got.text) || !bytes.Equal(again.csv, got.csv) {
		t.Errorf("two stations: the stored report renders differently from the built one")
	}

	plain := render(build(nil))
	for name, stations := range map[string]func() ([]string, func(string) string){
		"one station": func() ([]string, func(string) string) {
			return []string{"EDIHUB"}, func(string) string { return "EDIHUB" }
		},
		"no stations listed": func() ([]string, func(string) string) { return nil, func(string) string { return "" } },
	} {
		r := build(stations)
		if r.Station != "EDIHUB" {
			t.Errorf("%s: Station = %q, want EDIHUB", name, r.Station)
		}
		for _, q := range r.Partners {
			if q.Station != "" {
				t.Errorf("%s: partner %s Station = %q, want none", name, q.Name, q.Station)
			}
		}
		one := render(r)
		for what, b := range map[string][]byte{"Text": one.text, "HTML": one.html, "CSV": one.csv} {
			if bytes.Contains(b, []byte("→")) {
				t.Errorf("%s: %s names a station in a partner row:\n%s", name, what, b)
			}
		}
		if !bytes.Equal(one.text, plain.text) || !bytes.Equal(one.html, plain.html) || !bytes.Equal(one.csv, plain.csv) {
			t.Errorf("%s: the report differs from one built without Stations", name)
		}
	}
}
