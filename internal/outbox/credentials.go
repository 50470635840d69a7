package outbox

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/edihub/edihub/internal/config"
)

// applyAuth sets the partner's basic authentication on req, but only for
// the host of the partner's own URL: an async MDN to another host never
// carries the partner's password.
func applyAuth(req *http.Request, p *config.Partner) {
	if p == nil || p.BasicAuth == nil || p.URL == nil || !strings.EqualFold(req.URL.Host, p.URL.Host) {
		return
	}
	req.SetBasicAuth(p.BasicAuth.User, p.BasicAuth.Password)
}

// redactError removes passwords from the URLs net/http puts in its
// errors; its text is logged and stored for the API.
func redactError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = redactURL(ue.URL)
	}
	return err
}

// redactURL removes the userinfo of a URL; what cannot be parsed is
// replaced whole.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
