package api

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/httpserver"
)

// CertificateLister lists the configured certificates at a time;
// (*config.File).Certificates implements it.
type CertificateLister func(now time.Time) []config.CertificateInfo

// Certificate is one entry of GET /certificates.
type Certificate struct {
	Owner     string    `json:"owner"`
	Partner   string    `json:"partner,omitempty"`
	Station   string    `json:"station,omitempty"`
	Subject   string    `json:"subject"`
	Issuer    string    `json:"issuer"`
	Serial    string    `json:"serial"`
	NotBefore time.Time `json:"not_before"`
	NotAfter  time.Time `json:"not_after"`
	Active    bool      `json:"active"`
	Expired   bool      `json:"expired"`
}

// certificates answers GET /certificates: every station and partner
// certificate with its validity.
func (h *handler) certificates(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	out := struct {
		Certificates []Certificate `json:"certificates"`
	}{Certificates: []Certificate{}}
	for _, c := range h.o.Certificates(now) {
		out.Certificates = append(out.Certificates, Certificate{
			Owner: c.Owner, Partner: c.Partner, Station: c.Station, Subject: c.Subject, Issuer: c.Issuer, Serial: c.Serial,
			NotBefore: c.NotBefore, NotAfter: c.NotAfter, Active: c.Active, Expired: now.After(c.NotAfter),
		})
	}
	httpserver.WriteJSON(w, http.StatusOK, out)
}

// NewCertificateCollector exports each certificate's expiry as
// edihub_certificate_expiry_timestamp_seconds{owner, partner, serial}
// (owner station or partner; partner empty for the station; serial in hex
// tells a rollover's certificates apart), read at scrape time.
func NewCertificateCollector(list CertificateLister) prometheus.Collector {
	return &certCollector{list: list, desc: prometheus.NewDesc("edihub_certificate_expiry_timestamp_seconds",
		"Expiry (notAfter) of each configured certificate as a Unix timestamp, by owner (station or partner), partner AS2 ID (empty for the station) and serial number.",
		[]string{"owner", "partner", "serial"}, nil)}
}

type certCollector struct {
	list CertificateLister
	desc *prometheus.Desc
}

func (c *certCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *certCollector) Collect(ch chan<- prometheus.Metric) {
	seen := map[[3]string]bool{}
	for _, ci := range c.list(time.Now()) {
		k := [3]string{ci.Owner, ci.Partner, ci.Serial}
		if seen[k] { // the same certificate listed twice in one file
			continue
		}
		seen[k] = true
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(ci.NotAfter.Unix()), ci.Owner, ci.Partner, ci.Serial)
	}
}
