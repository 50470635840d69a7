package report_test

import (
	"bytes"
	"encoding/base64"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/report"
)

// docs is where the sample lives, relative to this package.
var docs = filepath.Join("..", "..", "docs")

// TestSampleInDocs keeps docs/report-sample.html (self-contained: its
// charts are data: URIs) and docs/report-sample.png (the hourly chart
// docs/report.md shows) rendered from the seeded day; -update rewrites them.
func TestSampleInDocs(t *testing.T) {
	r := sampleReport(t)
	vol, err := report.VolumeChart(r)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := report.PartnerChart(r)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := report.HTML(r, report.Images{
		Volume:   "data:image/png;base64," + base64.StdEncoding.EncodeToString(vol),
		Partners: "data:image/png;base64," + base64.StdEncoding.EncodeToString(parts),
	})
	if err != nil {
		t.Fatal(err)
	}
	checkSelfContained(t, doc, "data:image/png;base64,")
	htmlPath, pngPath := filepath.Join(docs, "report-sample.html"), filepath.Join(docs, "report-sample.png")
	if *update {
		if err := os.WriteFile(htmlPath, doc, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pngPath, vol, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	kept, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatalf("%v (go test ./internal/report -update writes it)", err)
	}
	if diff := cmp.Diff(string(textContent(doc)), string(textContent(kept))); diff != "" {
		t.Errorf("docs/report-sample.html is out of date (go test ./internal/report -update):\n%s", diff)
	}
	b, err := os.ReadFile(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil || img.Bounds().Dx() != report.ChartWidth || img.Bounds().Dy() != report.ChartHeight {
		t.Errorf("docs/report-sample.png: %v, %v; want a %dx%d PNG", err, img.Bounds(), report.ChartWidth, report.ChartHeight)
	}
}
