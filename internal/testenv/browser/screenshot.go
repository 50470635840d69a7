package browser

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// Screenshot writes the whole page of the tab as a PNG file at path
// (creating its directory): ViewportWidth pixels wide, as high as the page
// and at least ViewportHeight, one pixel per CSS pixel. It waits for the
// page's fonts first. Content wider than the viewport is cut off, as a
// person with that window would see it.
func Screenshot(ctx context.Context, path string) error {
	png, err := chromedp.Run(ctx, chromedp.Action[[]byte](func(ctx context.Context, t *chromedp.Target) ([]byte, error) {
		if _, err := chromedp.Evaluate[chromedp.Void]("document.fonts.ready.then(() => 0)", chromedp.EvalAwaitPromise)(ctx, t); err != nil {
			return nil, err
		}
		m, err := cdp.Call(ctx, t, page.GetLayoutMetrics, cdp.Empty{})
		if err != nil {
			return nil, err
		}
		height := float64(ViewportHeight)
		if m.CSSContentSize != nil {
			height = math.Max(height, math.Ceil(m.CSSContentSize.Height))
		}
		r, err := cdp.Call(ctx, t, page.CaptureScreenshot, page.CaptureScreenshotParams{
			Format:                page.CaptureScreenshotFormatPng,
			Clip:                  &page.Viewport{Width: ViewportWidth, Height: height, Scale: 1},
			CaptureBeyondViewport: new(true),
			FromSurface:           new(true),
		})
		return r.Data, err
	}))
	if err != nil {
		return fmt.Errorf("browser: screenshot: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("browser: screenshot: %w", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		return fmt.Errorf("browser: screenshot: %w", err)
	}
	return nil
}
