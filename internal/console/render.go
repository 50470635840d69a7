package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/auth"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

const staticPrefix = Prefix + "/static/"

// assets are the static files with a digest of their content, for URLs
// that change when the file does (cached for long, never stale).
var assets = func() map[string]string {
	m := map[string]string{}
	_ = fs.WalkDir(staticFS, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := staticFS.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		m[path.Base(p)] = staticPrefix + path.Base(p) + "?v=" + hex.EncodeToString(sum[:6])
		return nil
	})
	return m
}()

// static serves the stylesheet and the script.
func (c *Console) static(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, staticPrefix)
	b, err := staticFS.ReadFile("static/" + name)
	if err != nil || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	switch path.Ext(name) {
	case ".css":
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	case ".js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	default:
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	if r.URL.Query().Get("v") != "" {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		w.Header().Set("Cache-Control", "no-cache")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(b)
}

// pages are the parsed templates, one set per page: the layout and the
// page's own file.
type pages map[string]*template.Template

func parsePages() (pages, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("console: parse layout: %w", err)
	}
	files, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	ps := pages{}
	for _, f := range files {
		name := strings.TrimSuffix(path.Base(f), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, f)
		if err != nil {
			return nil, fmt.Errorf("console: parse %s: %w", f, err)
		}
		ps[name] = t
	}
	return ps, nil
}

// view is what every page's template gets.
type view struct {
	Title string
	// Nav names the menu entry of the page ("messages", "partners", ...).
	Nav string
	// User is who is signed in; nil on the sign-in and error pages of
	// nobody.
	User  *auth.Principal
	Flash string
	CSS   string
	JS    string
	// Data is the page's own.
	Data any
	loc  *time.Location
}

// Can reports whether the signed-in user has role (viewer, operator,
// admin) or above: to show what the user may use. The handlers check
// again.
func (v view) Can(role string) bool {
	r, err := auth.ParseRole(role)
	return err == nil && v.User != nil && v.User.Role.Allows(r)
}

// Time shows t in the console's time zone; "—" for a zero or nil time.
func (v view) Time(t any) string {
	var tt time.Time
	switch x := t.(type) {
	case time.Time:
		tt = x
	case *time.Time:
		if x != nil {
			tt = *x
		}
	}
	if tt.IsZero() {
		return "—"
	}
	return tt.In(v.loc).Format("2006-01-02 15:04:05 MST")
}

// timeText shows t as the pages do, for a text built in Go.
func (c *Console) timeText(t time.Time) string { return view{loc: c.o.Location}.Time(t) }

// view is the view of page title for r's user.
func (c *Console) view(r *http.Request, title, nav string, data any) view {
	v := view{Title: title, Nav: nav, CSS: assets["console.css"], JS: assets["console.js"], Data: data, loc: c.o.Location}
	if p, ok := auth.FromContext(r.Context()); ok {
		v.User = &p
	}
	if hasSession(r) && c.sessions.Exists(r.Context(), keyFlash) {
		v.Flash = c.sessions.PopString(r.Context(), keyFlash)
	}
	return v
}

// render writes page with v and status. The page is rendered into a
// buffer first: a template that fails shows an error page, not half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, v view) {
	t, ok := c.pages[page]
	if !ok {
		c.log.Error("no such template", zap.String("page", page))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", v); err != nil {
		c.log.Error("render", zap.String("page", page), zap.Error(err))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// errorData is the error page's.
type errorData struct {
	Status  int
	Message string
}

// fail shows an error page with status and msg.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	title := http.StatusText(status)
	c.render(w, r, status, "error", c.view(r, title, "", errorData{Status: status, Message: msg}))
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"pathEscape": url.PathEscape,
	"join":       strings.Join,
	"size":       size,
	"statusClass": func(s string) string {
		switch s {
		case "delivered", "sent", "processed", "done", "ok", "active", "accepted":
			return "ok"
		case "failed", "error", "orphan", "disabled", "revoked", "expired", "rejected", "negative", "cancelled":
			return "bad"
		case "retrying", "awaiting-mdn", "overdue", "pending", "sending", "accepted-with-errors":
			return "warn"
		}
		return "info"
	},
	"deref": func(p any) any {
		switch x := p.(type) {
		case *int:
			if x != nil {
				return *x
			}
		case *int64:
			if x != nil {
				return *x
			}
		case *bool:
			if x != nil {
				return *x
			}
		}
		return nil
	},
}

// size shows a byte count: 512 B, 1.5 KiB, 2.0 MiB.
func size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
