// Package browser drives Debian's Chromium from tests, through
// github.com/chromedp/chromedp: one headless browser per test binary, an
// isolated tab per test, and the checks a page of the ops console must pass
// (accessibility basics, keyboard reach and visible focus, no console errors
// or Content-Security-Policy violations) plus screenshots.
//
// The browser is started the first time a test asks for it and stopped by
// testenv.Main when the tests end, the way pgtest shares its PostgreSQL. It is
// /usr/bin/chromium, or chromium on PATH; a machine without it fails the test
// with the command that installs it (scripts/deps.sh does it as root). It
// never skips.
//
// Every tab has its own browser context (cookies, storage, cache) and the
// same viewport, 1280×800 CSS pixels at device scale 1, so tests run in
// parallel on the shared browser:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
//
//	func TestLoginPage(t *testing.T) {
//		t.Parallel()
//		srv := httptest.NewServer(handler)
//		t.Cleanup(srv.Close)
//		tab := browser.Start(t).NewTab(t)
//		if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/console/login")); err != nil {
//			t.Fatal(err)
//		}
//		problems, err := browser.CheckAccessibility(tab)
//		if err != nil {
//			t.Fatal(err)
//		}
//		for _, p := range problems {
//			t.Error(p)
//		}
//		problems, err = browser.CheckKeyboard(tab, []string{"#user", "#password", "button[type=submit]"})
//		// ... the same
//		errs, err := browser.Errors(tab) // console errors, exceptions, CSP violations
//		// ... want none
//		err = browser.Screenshot(tab, "../../docs/console/login.png")
//	}
//
// The checks are basics, not an audit: they compute what a page can get
// wrong most easily (a control without a label, grey text on white, a
// button Tab never reaches, focus styles removed) and say where.
package browser

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// Path is where Debian's chromium package installs the browser; Start
// looks there first, then for chromium on PATH.
const Path = "/usr/bin/chromium"

// Viewport is the size of every tab in CSS pixels, at device scale 1: what
// the checks see and the width of every screenshot.
const (
	ViewportWidth  = 1280
	ViewportHeight = 800
)

// ErrNoChromium reports that no Chromium was found.
var ErrNoChromium = errors.New("Chromium not found at " + Path + " or as chromium on PATH; " +
	"install Debian's package: apt-get install chromium (scripts/deps.sh does it when run as root)")

// Browser is a running headless Chromium shared by the tests of one binary.
// Its methods are safe for concurrent use.
type Browser struct {
	ctx     context.Context // the chromedp context that owns the process
	cancel  context.CancelFunc
	startup time.Duration
}

var (
	mu       sync.Mutex
	shared   *Browser
	startErr error
)

// Start returns the test binary's browser, starting it on the first call.
// A browser that cannot start fails tb (also on every later call, without
// trying again); it never skips. testenv.Main stops it when the tests end.
func Start(tb testing.TB) *Browser {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	if shared == nil && startErr == nil {
		path, err := find(Path)
		if err == nil {
			shared, err = start(path)
		}
		startErr = err
	}
	if startErr != nil {
		tb.Fatalf("browser: %v", startErr)
	}
	return shared
}

// Stop stops the browser Start started, waiting until the process exited
// and its profile directory is removed. Stopping when no browser runs is a
// no-op; a later Start starts a new one. Tabs still open are closed with it.
func Stop() {
	mu.Lock()
	defer mu.Unlock()
	if shared != nil {
		shared.stop()
	}
	shared, startErr = nil, nil
}

// find returns the browser at path, or chromium on PATH.
func find(path string) (string, error) {
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
		return path, nil
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p, nil
	}
	return "", ErrNoChromium
}

// flags are the ones known to work on the project's machines: headless, no
// GPU, and nothing that reaches out to Google (the machines have no network
// but loopback, and Chromium retries a refused connection many times).
// chromedp's defaults bring --headless, --no-first-run,
// --disable-background-networking and --disable-sync; it adds
// --remote-debugging-pipe and a fresh --user-data-dir, which it removes when
// the browser stops.
func flags(path string) []chromedp.ExecAllocatorOption {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("lang", "en-US"),
		chromedp.WindowSize(ViewportWidth, ViewportHeight),
	)
	if os.Geteuid() == 0 {
		// Chromium's sandbox refuses to run as root.
		opts = append(opts, chromedp.NoSandbox)
	}
	return opts
}

func start(path string) (*Browser, error) {
	began := time.Now()
	actx, acancel := chromedp.NewExecAllocator(context.Background(), flags(path)...)
	ctx, cancel := chromedp.NewContext(actx)
	stop := func() { cancel(); acancel() }
	// The first Do binds the process to ctx (no deadline here: it would end
	// the browser), so a start that hangs is bounded by a watchdog instead.
	watchdog := time.AfterFunc(time.Minute, stop)
	err := chromedp.Do(ctx)
	if !watchdog.Stop() {
		err = fmt.Errorf("no answer within a minute (%v)", err)
	}
	if err != nil {
		stop()
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	return &Browser{ctx: ctx, cancel: stop, startup: time.Since(began)}, nil
}

func (b *Browser) stop() {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	// A graceful close lets Chromium end its child processes; cancel kills
	// whatever is left and waits for the profile directory to be removed.
	_ = chromedp.Cancel(ctx)
	b.cancel()
}

// Startup is how long starting the browser took, up to its first answer.
func (b *Browser) Startup() time.Duration { return b.startup }

// NewTab opens a tab in a browser context of its own (cookies, storage and
// cache not shared with any other tab) with the 1280×800 viewport, and
// returns the chromedp context that drives it; use it with chromedp.Do and
// chromedp.Run, from one goroutine at a time. The page keeps focus whether
// or not its window is the browser's active one, so focus styles show in
// tabs running in parallel. The tab is closed at tb's cleanup; Errors reads
// what it collected.
func (b *Browser) NewTab(tb testing.TB) context.Context {
	tb.Helper()
	log := new(errorLog)
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext(), chromedp.WithListener(log.listen))
	tb.Cleanup(cancel)
	err := chromedp.Do(ctx,
		chromedp.EmulateViewport(ViewportWidth, ViewportHeight, chromedp.EmulateScale(1)),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := cdp.Call(ctx, t, emulation.SetFocusEmulationEnabled, emulation.SetFocusEmulationEnabledParams{Enabled: true})
			return err
		}),
	)
	if err != nil {
		tb.Fatalf("browser: open a tab: %v", err)
	}
	return context.WithValue(ctx, errorLogKey{}, log)
}
