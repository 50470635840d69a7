package probe

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/config"
)

// TestRedact: a secret of the profile that reached a step's detail (an
// error quoting it) is replaced; short values and ordinary words stay.
func TestRedact(t *testing.T) {
	u, err := url.Parse("https://edi:url-secret@as2.acme.example/as2")
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := url.Parse("http://p:proxy-secret@proxy.example:3128")
	if err != nil {
		t.Fatal(err)
	}
	r := &run{p: &config.Partner{
		URL: u, Proxy: proxy,
		BasicAuth: &config.BasicAuth{User: "edi", Password: "auth-secret"},
		Headers:   http.Header{"X-Api-Key": {"header-secret"}, "X-Mode": {"test"}},
	}}
	r.rep.Steps = []Step{{Detail: "got url-secret, proxy-secret, auth-secret and header-secret in a connectivity test"}}
	r.redact()
	got := r.rep.Steps[0].Detail
	if strings.Contains(got, "secret") || !strings.Contains(got, "connectivity test") {
		t.Errorf("redact: %q", got)
	}
}
