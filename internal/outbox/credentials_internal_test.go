package outbox

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/edihub/edihub/internal/config"
)

// TestApplyAuthSameOriginOnly: the partner's basic authentication and
// extra header fields go only to the scheme, host and port of its URL
// (default ports spelt out or not, host case ignored); never over http
// when the partner's URL is https, nor to another port or host.
func TestApplyAuthSameOriginOnly(t *testing.T) {
	tests := []struct {
		partner, target string
		want            bool
	}{
		{"https://as2.acme.example/as2", "https://as2.acme.example/mdn", true},
		{"https://as2.acme.example/as2", "https://AS2.Acme.Example/mdn", true},
		{"https://as2.acme.example/as2", "https://as2.acme.example:443/mdn", true},
		{"https://as2.acme.example:443/as2", "https://as2.acme.example/mdn", true},
		{"https://as2.acme.example:8443/as2", "https://as2.acme.example:8443/mdn", true},
		{"http://as2.acme.example/as2", "http://as2.acme.example:80/mdn", true},
		{"http://127.0.0.1:8080/as2", "http://127.0.0.1:8080/mdn", true},
		{"https://[2001:db8::1]/as2", "https://[2001:db8::1]:443/mdn", true},

		{"https://as2.acme.example/as2", "http://as2.acme.example/mdn", false},
		{"https://as2.acme.example:8443/as2", "http://as2.acme.example:8443/mdn", false},
		{"https://as2.acme.example/as2", "http://as2.acme.example:443/mdn", false},
		{"https://as2.acme.example/as2", "https://as2.acme.example:8443/mdn", false},
		{"https://as2.acme.example/as2", "https://as2.acme.example:80/mdn", false},
		{"https://as2.acme.example/as2", "https://mdn.acme.example/mdn", false},
		{"https://as2.acme.example/as2", "https://as2.acme.example.evil.example/mdn", false},
		{"http://as2.acme.example/as2", "https://as2.acme.example/mdn", false},
		{"http://127.0.0.1:8080/as2", "http://127.0.0.1:8081/mdn", false},
	}
	for _, tt := range tests {
		pu, err := url.Parse(tt.partner)
		if err != nil {
			t.Fatal(err)
		}
		p := &config.Partner{
			AS2ID:     "ACME",
			URL:       pu,
			BasicAuth: &config.BasicAuth{User: "edi", Password: "s3cret"},
			Headers:   http.Header{"X-Api-Key": {"k3y"}},
		}
		req, err := http.NewRequest(http.MethodPost, tt.target, nil)
		if err != nil {
			t.Fatal(err)
		}
		applyAuth(req, p)
		_, _, gotAuth := req.BasicAuth()
		gotHeader := req.Header.Get("X-Api-Key") != ""
		if gotAuth != tt.want || gotHeader != tt.want {
			t.Errorf("applyAuth(POST %s) for a partner at %s: basic auth %v, extra header %v; want %v", tt.target, tt.partner, gotAuth, gotHeader, tt.want)
		}
	}
}
