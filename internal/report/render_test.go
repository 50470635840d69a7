package report_test

import (
	"bytes"
	"context"
	"flag"
	"html"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/report"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata and the sample under docs")

// golden compares got with testdata/name, or writes it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/report -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got; go test ./internal/report -update rewrites it):\n%s", name, diff)
	}
}

var (
	tagRE   = regexp.MustCompile(`<[^>]*>`)
	breakRE = regexp.MustCompile(`(?i)</tr>|<br>|</div>|</h\d>|</p>`)
	spaceRE = regexp.MustCompile(`[ \t]+`)
)

// textContent is what a reader sees of an HTML document, line by line.
func textContent(doc []byte) []byte {
	s := string(doc)
	s = s[strings.Index(s, "<body"):]
	s = breakRE.ReplaceAllString(s, "\n")
	s = tagRE.ReplaceAllString(s, " ")
	s = html.UnescapeString(s)
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(spaceRE.ReplaceAllString(l, " ")); l != "" {
			out = append(out, l)
		}
	}
	return []byte(strings.Join(out, "\n") + "\n")
}

// sampleDay is the seeded day of the golden files and the docs sample.
func sampleDay(t *testing.T) (report.Day, time.Time) {
	loc := mustLoad(t, "Europe/Berlin")
	d := time.Date(2026, 11, 30, 0, 0, 0, 0, loc)
	return report.DayOf(d, loc), d
}

func sampleReport(t *testing.T) *report.Report {
	t.Helper()
	day, d := sampleDay(t)
	st := newSeededStore(t, standardSeed(d))
	b := &report.Builder{Source: st, Station: "EDIHUB", Lease: testLease, Partners: []string{"ACME CORP", "GLOBEX", "INITECH", "UMBRELLA"},
		Now: func() time.Time { return d.AddDate(0, 0, 1).Add(15 * time.Minute) }}
	r, err := b.Build(context.Background(), day)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkSelfContained fails when doc would load anything from elsewhere.
func checkSelfContained(t *testing.T, doc []byte, imgPrefix string) {
	t.Helper()
	s := strings.ToLower(string(doc))
	for _, bad := range []string{"<link", "<script", "@import", "url(", "src=\"http", "src=\"//", "<iframe", "<object"} {
		if strings.Contains(s, bad) {
			t.Errorf("HTML contains %q: a mail client blocking remote content would not show it right", bad)
		}
	}
	for _, m := range regexp.MustCompile(`src="([^"]*)"`).FindAllStringSubmatch(string(doc), -1) {
		if !strings.HasPrefix(m[1], imgPrefix) {
			t.Errorf("img src %q, want %s...", m[1], imgPrefix)
		}
	}
}

func TestRenderGolden(t *testing.T) {
	r := sampleReport(t)
	doc, err := report.HTML(r, report.Images{Volume: "cid:" + report.VolumeCID, Partners: "cid:" + report.PartnersCID})
	if err != nil {
		t.Fatal(err)
	}
	checkSelfContained(t, doc, "cid:")
	if n := strings.Count(string(doc), `src="cid:`); n != 2 {
		t.Errorf("HTML refers to %d inline images, want 2", n)
	}
	golden(t, "day.html.txt", textContent(doc))
	golden(t, "day.txt", report.Text(r))
	c, err := report.CSV(r)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "day.csv", c)
	j, err := report.JSON(r)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "day.json", j)
	back, err := report.FromJSON(j)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, back, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("FromJSON(JSON(r)) differs (-r +back):\n%s", diff)
	}
	// Rendering the stored form gives the same mail.
	doc2, err := report.HTML(back, report.Images{Volume: "cid:" + report.VolumeCID, Partners: "cid:" + report.PartnersCID})
	if err != nil || !bytes.Equal(doc, doc2) {
		t.Errorf("HTML of the stored report differs from the built one (err %v)", err)
	}
	for name, chart := range map[string]func(*report.Report) ([]byte, error){"volume": report.VolumeChart, "partners": report.PartnerChart} {
		b, err := chart(r)
		if err != nil {
			t.Fatalf("%s chart: %v", name, err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s chart is not a PNG: %v", name, err)
		}
		if sz := img.Bounds().Size(); sz.X != report.ChartWidth || sz.Y != report.ChartHeight {
			t.Errorf("%s chart is %v, want %dx%d", name, sz, report.ChartWidth, report.ChartHeight)
		}
	}
}

func TestRenderNoTraffic(t *testing.T) {
	day, d := sampleDay(t)
	st := newSeededStore(t, &seed{})
	b := &report.Builder{Source: st, Station: "EDIHUB", Lease: testLease, Partners: []string{"ACME CORP"},
		Now: func() time.Time { return d.AddDate(0, 0, 1).Add(15 * time.Minute) }}
	r, err := b.Build(context.Background(), day)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Empty() {
		t.Fatalf("Empty() = false for a day without traffic")
	}
	doc, err := report.HTML(r, report.Images{})
	if err != nil {
		t.Fatal(err)
	}
	checkSelfContained(t, doc, "none")
	if strings.Contains(string(doc), "<img") {
		t.Error("the no-traffic report has a chart")
	}
	text := report.Text(r)
	if !bytes.Contains(text, []byte("No documents were received or sent on Monday 30 November 2026")) {
		t.Errorf("Text does not say there was no traffic:\n%s", text)
	}
	golden(t, "empty.html.txt", textContent(doc))
	golden(t, "empty.txt", text)
	if c, err := report.PartnerChart(r); err != nil || c != nil {
		t.Errorf("PartnerChart(no traffic) = %d bytes, %v; want none", len(c), err)
	}
}
