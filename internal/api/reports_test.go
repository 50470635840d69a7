package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"net/http"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/report"
)

func (e *env) get(t *testing.T, path, accept string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	return send(t, req)
}

func TestReports(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: e.store, Config: e.cfg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, outbox.Document{Partner: "ACME CORP", ContentType: "application/EDI-X12", Filename: "a.edi", Payload: []byte("ISA*00")}); err != nil {
		t.Fatal(err)
	}
	// Today, freshly computed (preliminary), in each format.
	r := e.get(t, "/api/v1/reports/today?format=json", "")
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET today json = %d %s: %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	var rep report.Report
	if err := json.Unmarshal(r.body, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Hub.Sent != 1 || !rep.Preliminary || rep.Partner("ACME CORP").Queued != 1 {
		t.Errorf("today: sent %d, preliminary %v, ACME queued %d; want 1, true, 1", rep.Hub.Sent, rep.Preliminary, rep.Partner("ACME CORP").Queued)
	}
	tests := []struct {
		path, accept, wantType, wantIn string
	}{
		{"/api/v1/reports/today", "text/html", "text/html; charset=utf-8", "data:image/png;base64,"},
		{"/api/v1/reports/today?format=csv", "", "text/csv; charset=utf-8", "ACME CORP"},
		{"/api/v1/reports/today", "text/plain;q=0.5", "text/plain; charset=utf-8", "preliminary"},
		{"/api/v1/reports/today", "image/png", "image/png", "PNG"},
		{"/api/v1/reports/today", "", "application/json", `"station": "EDIHUB"`},
	}
	for _, tt := range tests {
		r := e.get(t, tt.path, tt.accept)
		if r.status != http.StatusOK || r.header.Get("Content-Type") != tt.wantType || !strings.Contains(string(r.body), tt.wantIn) {
			t.Errorf("GET %s (Accept %q) = %d %q, want 200 %q holding %q", tt.path, tt.accept, r.status, r.header.Get("Content-Type"), tt.wantType, tt.wantIn)
		}
		if tt.wantType == "image/png" {
			if img, err := png.Decode(bytes.NewReader(r.body)); err != nil || img.Bounds().Dx() != report.ChartWidth {
				t.Errorf("PNG chart: %v", err)
			}
		}
	}
	// A stored report is served as stored.
	stored := &report.Report{Version: report.FormatVersion, Station: "STORED", TimeZone: "UTC", Period: report.Period{Day: "2026-11-30"}}
	j, err := report.JSON(stored)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.SaveReportManual(ctx, "edihub-leader", postgres.NewReport{Day: "2026-11-30", Figures: j}); err != nil {
		t.Fatal(err)
	}
	if r := e.get(t, "/api/v1/reports/2026-11-30?format=json", ""); r.status != http.StatusOK || !strings.Contains(string(r.body), `"station": "STORED"`) {
		t.Errorf("stored report: %d %s", r.status, r.body)
	}
	// Bad input names the parameter; no token, no report.
	for _, tt := range []struct{ path, param string }{
		{"/api/v1/reports/2026-13-01", "day"},
		{"/api/v1/reports/last-week", "day"},
		{"/api/v1/reports/today?format=pdf", "format"},
	} {
		r := e.get(t, tt.path, "")
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"parameter": "`+tt.param+`"`) {
			t.Errorf("GET %s = %d %s, want 400 naming %s", tt.path, r.status, r.body, tt.param)
		}
	}
	if r := e.do(t, http.MethodGet, "/api/v1/reports/today", "", nil, ""); r.status != http.StatusUnauthorized {
		t.Errorf("GET without a token = %d, want 401", r.status)
	}
}
