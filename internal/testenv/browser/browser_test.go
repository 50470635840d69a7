package browser_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/browser"
)

// TestMain stops the shared browser through testenv.Main; the leak check
// proves that stopping it leaves no goroutine of chromedp behind.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.CheckLeaks())) }

// csp is what every page is served with unless a test says otherwise: no
// inline script or style, as the console's pages will be.
const csp = "default-src 'self'"

// site serves testdata/ and the pages of bad, each at /bad/<name>, under
// the Content-Security-Policy csp; /csp.html under script-src 'self' only.
func site(t *testing.T, bad map[string]string) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(os.DirFS("testdata")))
	mux.HandleFunc("GET /pixel.png", func(w http.ResponseWriter, r *http.Request) {
		img := image.NewRGBA(image.Rect(0, 0, 1, 1))
		img.Set(0, 0, color.RGBA{0x1a, 0x3d, 0x6d, 0xff})
		w.Header().Set("Content-Type", "image/png")
		_ = png.Encode(w, img)
	})
	mux.HandleFunc("GET /bad/{name}", func(w http.ResponseWriter, r *http.Request) {
		body, ok := bad[r.PathValue("name")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, body)
	})
	mux.HandleFunc("GET /set-cookie", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "who", Value: r.URL.Query().Get("who"), Path: "/"})
		fmt.Fprint(w, "set")
	})
	mux.HandleFunc("GET /whoami", func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie("who")
		if err != nil {
			fmt.Fprint(w, "nobody")
			return
		}
		fmt.Fprint(w, c.Value)
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/csp.html" {
			w.Header().Set("Content-Security-Policy", "script-src 'self'")
		} else {
			w.Header().Set("Content-Security-Policy", csp)
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// page is a document that passes every accessibility check around body.
func page(body string) string {
	return doc(`<html lang="en">`, `<title>A page</title>`, `<h1>A page</h1>`+body)
}

func doc(html, title, body string) string {
	return `<!doctype html>` + html + `<head><meta charset="utf-8">` + title +
		`<link rel="stylesheet" href="/app.css"></head><body><main>` + body + `</main></body></html>`
}

// open opens url in a new tab of the shared browser.
func open(t *testing.T, url string) context.Context {
	t.Helper()
	tab := browser.Start(t).NewTab(t)
	if err := chromedp.Do(tab, chromedp.Navigate(url)); err != nil {
		t.Fatalf("Navigate(%s): %v", url, err)
	}
	return tab
}

// found is a problem without its detail, for comparing.
type found struct{ Rule, Element string }

func founds(problems []browser.Problem) []found {
	var fs []found
	for _, p := range problems {
		fs = append(fs, found{p.Rule, p.Element})
	}
	return fs
}

// TestGoodPagePassesEveryCheck also logs what each step costs: the first
// test to call Start pays for the browser's startup.
func TestGoodPagePassesEveryCheck(t *testing.T) {
	t.Parallel()
	srv := site(t, nil)
	var took []string
	lap := func(what string, since time.Time) time.Time {
		now := time.Now()
		took = append(took, fmt.Sprintf("%s %v", what, now.Sub(since).Round(time.Millisecond)))
		return now
	}
	mark := time.Now()
	b := browser.Start(t)
	mark = lap("Start", mark)
	tab := b.NewTab(t)
	mark = lap("NewTab", mark)
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/good.html")); err != nil {
		t.Fatal(err)
	}
	mark = lap("Navigate", mark)

	problems, err := browser.CheckAccessibility(tab)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("CheckAccessibility: %v", p)
	}
	mark = lap("CheckAccessibility", mark)
	want := []string{"#user", "#password", "#role", "#note", "#remember", "button[type=submit]", "#help", "#close"}
	problems, err = browser.CheckKeyboard(tab, want)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("CheckKeyboard: %v", p)
	}
	mark = lap(fmt.Sprintf("CheckKeyboard (%d stops)", len(want)), mark)
	errs, err := browser.Errors(tab)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		t.Errorf("Errors: %s", e)
	}
	lap("Errors", mark)
	// The page's own script ran: the policy allows what the page needs.
	ready, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.getElementById("user").dataset.ready`))
	if err != nil || ready != "yes" {
		t.Errorf("app.js ran: data-ready = %q, %v; want yes", ready, err)
	}
	t.Logf("browser startup %v; %s", b.Startup().Round(time.Millisecond), strings.Join(took, ", "))
}

func TestCheckAccessibilityFindsEachFlaw(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		give   string
		want   []found
		detail string // in the first problem's detail
	}{
		{"input without a label", page(`<input id="q" name="q" placeholder="Search">`),
			[]found{{"label", `input#q[name="q"]`}}, "without a label"},
		{"label wrapping only a select", page(`<label><select id="colour"><option>Red</option></select></label>`),
			[]found{{"label", `select#colour`}}, ""},
		{"label for= without text", page(`<label for="q"> </label><input id="q">`),
			[]found{{"label", `input#q`}}, ""},
		{"image without alt", page(`<img id="logo" src="/pixel.png">`),
			[]found{{"alt", `img#logo`}}, ""},
		{"button without a name", page(`<button id="x" type="button"></button>`),
			[]found{{"name", `button#x`}}, ""},
		{"link around a decorative image", page(`<a id="home" href="/"><img src="/pixel.png" alt=""></a>`),
			[]found{{"name", `a#home`}}, ""},
		{"no lang", doc(`<html>`, `<title>A page</title>`, `<h1>A page</h1>`),
			[]found{{"lang", `html`}}, ""},
		{"no title", doc(`<html lang="en">`, ``, `<h1>A page</h1>`),
			[]found{{"title", `document`}}, ""},
		{"no h1", doc(`<html lang="en">`, `<title>A page</title>`, `<h2>A page</h2>`),
			[]found{{"h1", `document`}}, "0 h1"},
		{"two h1", page(`<h1>Again</h1>`),
			[]found{{"h1", `h1 "Again"`}}, "2 h1"},
		{"#999 on white", page(`<p id="p" class="grey">Grey text</p>`),
			[]found{{"contrast", `p#p "Grey text"`}}, "2.85:1 (#999999 on #ffffff, 16px normal text), want at least 4.5:1"},
		{"#999 on white, large", page(`<p id="p" class="grey-large">Grey text</p>`),
			[]found{{"contrast", `p#p "Grey text"`}}, "want at least 3:1"},
		{"#777 on white, normal size", page(`<p id="p" class="just-short">Grey text</p>`),
			[]found{{"contrast", `p#p "Grey text"`}}, "4.48:1"},
		{"white on a translucent background", page(`<p id="p" class="translucent">Pale</p>`),
			[]found{{"contrast", `p#p "Pale"`}}, "on #cccccc"},
		{"white on white", page(`<div class="white"><span id="s">Invisible</span></div>`),
			[]found{{"contrast", `span#s "Invisible"`}}, "1.00:1"},
	}
	bad := make(map[string]string)
	for i, tt := range tests {
		bad[fmt.Sprint(i)] = tt.give
	}
	srv := site(t, bad)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tab := open(t, fmt.Sprintf("%s/bad/%d", srv.URL, i))
			problems, err := browser.CheckAccessibility(tab)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, founds(problems)); diff != "" {
				t.Errorf("CheckAccessibility problems (-want +got):\n%s\n%v", diff, problems)
			}
			if len(problems) > 0 && !strings.Contains(problems[0].Detail, tt.detail) {
				t.Errorf("CheckAccessibility detail = %q, want it to contain %q", problems[0].Detail, tt.detail)
			}
		})
	}
}

func TestCheckKeyboardFindsEachFlaw(t *testing.T) {
	t.Parallel()
	form := func(button string) string {
		return page(`<form><label for="user">User</label><input id="user">` + button + `<a id="help" href="/help">Help</a></form>`)
	}
	tests := []struct {
		name string
		give string
		want []string
		got  []browser.Problem
	}{
		{"reachable", form(`<button id="go">Go</button>`), []string{"#user", "#go", "#help"}, nil},
		{"tabindex=-1 on the button", form(`<button id="go" tabindex="-1">Go</button>`), []string{"#user", "#go", "#help"},
			[]browser.Problem{{Rule: "keyboard", Element: `button#go "Go"`, Detail: `Tab never reaches it (selector "#go")`}}},
		{"out of order", form(`<button id="go">Go</button>`), []string{"#user", "#help", "#go"},
			[]browser.Problem{{Rule: "keyboard", Element: "#help", Detail: "Tab reaches it after #go; want it before (the order of want: #user, #help, #go)"}}},
		{"no such element", form(`<button id="go">Go</button>`), []string{"#user", "#nope", "#go"},
			[]browser.Problem{{Rule: "keyboard", Element: "#nope", Detail: "the selector matches no element"}}},
		{"focus style removed", form(`<button id="go" class="plain">Go</button>`), []string{"#user", "#go", "#help"},
			[]browser.Problem{{Rule: "focus-visible", Element: `button#go "Go"`, Detail: "looks the same focused as unfocused (no outline, box-shadow, border or colour change)"}}},
		{"positive tabindex", form(`<button id="go" tabindex="1">Go</button>`), []string{"#go", "#user", "#help"},
			[]browser.Problem{{Rule: "keyboard", Element: `button#go "Go" (tabindex=1)`, Detail: "a positive tabindex takes it out of the document's tab order"}}},
	}
	bad := make(map[string]string)
	for i, tt := range tests {
		bad[fmt.Sprint(i)] = tt.give
	}
	srv := site(t, bad)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tab := open(t, fmt.Sprintf("%s/bad/%d", srv.URL, i))
			problems, err := browser.CheckKeyboard(tab, tt.want)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.got, problems); diff != "" {
				t.Errorf("CheckKeyboard(%q) (-want +got):\n%s", tt.want, diff)
			}
		})
	}
}

// TestCheckKeyboardStartsAtTheTop: where the focus was before does not
// change where Tab starts.
func TestCheckKeyboardStartsAtTheTop(t *testing.T) {
	t.Parallel()
	srv := site(t, nil)
	tab := open(t, srv.URL+"/good.html")
	if err := chromedp.Do(tab, chromedp.Focus(chromedp.CSS("#help"))); err != nil {
		t.Fatal(err)
	}
	problems, err := browser.CheckKeyboard(tab, []string{"#user", "#help"})
	if err != nil || len(problems) > 0 {
		t.Errorf("CheckKeyboard after focusing #help = %v, %v; want no problems", problems, err)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	srv := site(t, map[string]string{
		"broken":  page(`<script src="/broken.js"></script>`),
		"missing": page(`<img src="/missing.png" alt="">`),
	})
	tests := []struct {
		path string
		want []string // each in one error, in order
	}{
		{"/good.html", nil},
		{"/csp.html", []string{"security: Executing inline script violates the following Content Security Policy directive 'script-src 'self''"}},
		{"/bad/broken", []string{"console.error: boom 42 (" + srv.URL + "/broken.js:1)", "exception: Uncaught Error: kaput"}},
		{"/bad/missing", []string{"network: Failed to load resource: the server responded with a status of 404 (Not Found) (" + srv.URL + "/missing.png)"}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			tab := open(t, srv.URL+tt.path)
			errs, err := browser.Errors(tab)
			if err != nil {
				t.Fatal(err)
			}
			if len(errs) != len(tt.want) {
				t.Fatalf("Errors = %q, want %d errors containing %q", errs, len(tt.want), tt.want)
			}
			for i := range errs {
				if !strings.Contains(errs[i], tt.want[i]) {
					t.Errorf("Errors[%d] = %q, want it to contain %q", i, errs[i], tt.want[i])
				}
			}
		})
	}
}

// TestCSPBlocksTheInlineScript: the violation Errors reports is real, the
// script did not run.
func TestCSPBlocksTheInlineScript(t *testing.T) {
	t.Parallel()
	tab := open(t, site(t, nil).URL+"/csp.html")
	title, err := chromedp.Run(tab, chromedp.Title())
	if err != nil || title != "Blocked" {
		t.Errorf("title = %q, %v; want Blocked (the inline script would rename it)", title, err)
	}
}

func TestErrorsNeedsATab(t *testing.T) {
	t.Parallel()
	if _, err := browser.Errors(t.Context()); err == nil {
		t.Error("Errors(a context not from NewTab) = nil error, want one")
	}
}

func TestScreenshot(t *testing.T) {
	t.Parallel()
	srv := site(t, map[string]string{
		"tall": `<!doctype html><html lang="en"><head><title>Tall</title><link rel="stylesheet" href="/app.css"></head>` +
			`<body class="tall-page"><div class="tall"></div></body></html>`,
	})
	tests := []struct {
		path   string
		width  int
		height int
		at     image.Point
		colour color.RGBA
	}{
		{"/good.html", 1280, 800, image.Pt(40, 40), color.RGBA{0x1a, 0x3d, 0x6d, 0xff}},    // the banner
		{"/bad/tall", 1280, 2000, image.Pt(640, 1990), color.RGBA{0x00, 0xaa, 0x00, 0xff}}, // below the fold
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			tab := open(t, srv.URL+tt.path)
			path := filepath.Join(t.TempDir(), "shots", "page.png")
			if err := browser.Screenshot(tab, path); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("png.Decode(%s): %v", path, err)
			}
			if got := img.Bounds().Size(); got != image.Pt(tt.width, tt.height) {
				t.Errorf("screenshot size = %v, want %dx%d", got, tt.width, tt.height)
			}
			if got := color.RGBAModel.Convert(img.At(tt.at.X, tt.at.Y)); got != tt.colour {
				t.Errorf("pixel at %v = %v, want %v", tt.at, got, tt.colour)
			}
		})
	}
}

// TestTabsAreIsolated: a cookie set in one tab is not sent by another,
// whichever runs first.
func TestTabsAreIsolated(t *testing.T) {
	t.Parallel()
	srv := site(t, nil)
	b := browser.Start(t)
	tabs := make([]context.Context, 4)
	for i := range tabs {
		tabs[i] = b.NewTab(t)
	}
	var wg sync.WaitGroup
	got := make([]string, len(tabs))
	for i, tab := range tabs {
		wg.Go(func() {
			err := chromedp.Do(tab,
				chromedp.Navigate(fmt.Sprintf("%s/set-cookie?who=tab%d", srv.URL, i)),
				chromedp.Navigate(srv.URL+"/whoami"),
			)
			if err != nil {
				t.Error(err)
				return
			}
			got[i], err = chromedp.Run(tab, chromedp.Evaluate[string]("document.body.innerText"))
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	tab := open(t, srv.URL+"/whoami")
	fresh, err := chromedp.Run(tab, chromedp.Evaluate[string]("document.body.innerText"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"tab0", "tab1", "tab2", "tab3"}, got); diff != "" {
		t.Errorf("each tab's cookie (-want +got):\n%s", diff)
	}
	if fresh != "nobody" {
		t.Errorf("a fresh tab sends cookie %q, want none", fresh)
	}
}
