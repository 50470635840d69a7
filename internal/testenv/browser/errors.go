package browser

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"

	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

type errorLogKey struct{}

// errorLog collects a tab's errors from its first event on. chromedp calls
// listen in the loop that reads the tab's messages, in order of arrival.
type errorLog struct {
	mu     sync.Mutex
	errors []string
}

func (l *errorLog) listen(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError && ev.Type != runtime.ConsoleAPICalledTypeAssert {
			return
		}
		args := make([]string, 0, len(ev.Args))
		for _, a := range ev.Args {
			args = append(args, remoteText(a))
		}
		msg = "console." + string(ev.Type) + ": " + strings.Join(args, " ") + where(ev.StackTrace)
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		text := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			text += " " + d.Exception.Description
		}
		msg = fmt.Sprintf("exception: %s (%s:%d)", text, d.URL, d.LineNumber+1)
	case *log.EventEntryAdded:
		// The browser's own log: Content-Security-Policy violations
		// (source "security"), failed requests ("network"), and more.
		if ev.Entry.Level != log.EntryLevelError || isFavicon(ev.Entry) {
			return
		}
		msg = string(ev.Entry.Source) + ": " + ev.Entry.Text
		if ev.Entry.URL != "" {
			msg += " (" + ev.Entry.URL + ")"
		}
	default:
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errors = append(l.errors, msg)
}

// isFavicon reports the failure of the request for /favicon.ico that
// Chromium makes by itself, at no fixed moment after the load: a test that
// counted it would pass or fail by timing. A page's own icon link counts.
func isFavicon(e *log.Entry) bool {
	u, err := url.Parse(e.URL)
	return err == nil && e.Source == log.EntrySourceNetwork && u.Path == "/favicon.ico"
}

func remoteText(o *runtime.RemoteObject) string {
	if o.Type == runtime.RemoteObjectTypeString {
		var s string
		if err := jsonv2.Unmarshal(o.Value, &s); err == nil {
			return s
		}
	}
	switch {
	case o.Description != "":
		return o.Description
	case o.UnserializableValue != "":
		return string(o.UnserializableValue)
	case len(o.Value) > 0:
		return string(o.Value)
	}
	return string(o.Type)
}

func where(st *runtime.StackTrace) string {
	if st == nil || len(st.CallFrames) == 0 {
		return ""
	}
	f := st.CallFrames[0]
	return fmt.Sprintf(" (%s:%d)", f.URL, f.LineNumber+1)
}

// Errors returns what went wrong in the tab since NewTab opened it, one line
// each, oldest first: console.error and console.assert calls, uncaught
// exceptions and unhandled rejections, and the browser's error log, which
// holds Content-Security-Policy violations ("security: ... violates the
// following Content Security Policy directive ...") and failed loads
// ("network: Failed to load resource ..."), but for Chromium's own request
// for /favicon.ico. A page that loads cleanly has none. ctx must come from
// NewTab.
func Errors(ctx context.Context) ([]string, error) {
	l, ok := ctx.Value(errorLogKey{}).(*errorLog)
	if !ok {
		return nil, errors.New("browser: Errors needs a context from Browser.NewTab")
	}
	// The listener sees events in order of arrival, so once the answer to
	// this command is in, every event the page sent before it was recorded.
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void]("0")); err != nil {
		return nil, fmt.Errorf("browser: read the tab's errors: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errors...), nil
}
