package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edihub/edihub/internal/api"
)

// TestCertificates: GET /certificates lists the station's and every
// partner's certificate with its expiry, and the collector exports each
// one's expiry as edihub_certificate_expiry_timestamp_seconds.
func TestCertificates(t *testing.T) {
	e := setup(t)
	r := e.do(t, http.MethodGet, "/api/v1/certificates", "", nil, token)
	if r.status != http.StatusOK {
		t.Fatalf("GET /certificates = %d %s", r.status, r.body)
	}
	var got struct {
		Certificates []api.Certificate `json:"certificates"`
	}
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	owners := map[string]int{}
	for _, c := range got.Certificates {
		owners[c.Owner+"/"+c.Partner]++
		if c.NotAfter.Before(time.Now()) || c.Serial == "" || !c.Active {
			t.Errorf("certificate %+v: want a current, active one with a serial", c)
		}
	}
	if owners["station/"] != 1 || owners["partner/ACME CORP"] != 1 || owners["partner/GLOBEX"] != 1 || len(got.Certificates) != 3 {
		t.Errorf("certificates by owner = %v, want the station's and one per partner", owners)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(api.NewCertificateCollector(e.cfg.Certificates))
	if n := testutil.CollectAndCount(reg, "edihub_certificate_expiry_timestamp_seconds"); n != 3 {
		t.Errorf("%d expiry series, want 3", n)
	}
	want := e.cfg.Station.Certificate.NotAfter.Unix()
	mfs, _ := reg.Gather()
	found := false
	for _, m := range mfs[0].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["owner"] == "station" {
			found = int64(m.GetGauge().GetValue()) == want && labels["partner"] == ""
		}
		if labels["owner"] == "partner" && !strings.Contains("ACME CORP GLOBEX", labels["partner"]) {
			t.Errorf("series with partner %q", labels["partner"])
		}
	}
	if !found {
		t.Errorf("no station series with the certificate's notAfter %d", want)
	}
}
