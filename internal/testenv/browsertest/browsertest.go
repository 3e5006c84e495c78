// Package browsertest drives the web front-ends (package web) in a real
// headless Chromium for tests: it starts the all-in-one system with its demo,
// opens tabs with chromedp, runs the vendored axe-core accessibility checks in
// the page and writes screenshots.
//
// Chromium is Debian's (/usr/bin/chromium, or DPCS_TEST_CHROMIUM). When none
// is found the browser tests are skipped, unless DPCS_TEST_REQUIRE_BROWSER=1
// (make integration sets it), when they fail.
package browsertest

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/dabom/dpcs/policy"
)

// axeSource is axe-core (MPL-2.0, axe/LICENSE), vendored from npm at 4.14.1.
//
//go:embed axe/axe.min.js
var axeSource string

// Viewport is a tab's size.
type Viewport struct {
	Width, Height int64
	Mobile        bool
}

// The viewports of the screenshots: a phone and a desktop.
var (
	Phone   = Viewport{Width: 390, Height: 844, Mobile: true}
	Desktop = Viewport{Width: 1280, Height: 800}
)

// Browser is one headless Chromium for a test.
type Browser struct {
	ctx context.Context
}

// ChromiumPath returns the Chromium to drive ("" when none is found).
func ChromiumPath() string {
	if p := os.Getenv("DPCS_TEST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser", "chromium", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// New starts a headless Chromium for t, closed when t ends.
func New(t testing.TB) *Browser {
	t.Helper()
	path := ChromiumPath()
	if path == "" {
		if os.Getenv("DPCS_TEST_REQUIRE_BROWSER") == "1" {
			t.Fatal("browsertest: no Chromium found (apt-get install chromium, or set DPCS_TEST_CHROMIUM)")
		}
		t.Skip("browsertest: no Chromium found (apt-get install chromium); DPCS_TEST_REQUIRE_BROWSER=1 makes this fail")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("lang", "ko-KR"),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	// Start the browser now, so a failure to start names itself.
	if err := chromedp.Run(ctx); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("browsertest: start %s: %v", path, err)
	}
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	return &Browser{ctx: ctx}
}

// Page opens a new tab sized vp, closed when t ends. Its context carries a
// deadline of 2 minutes: every chromedp action on it fails after that.
func (b *Browser) Page(t testing.TB, vp Viewport) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelT()
		cancel()
	})
	scale := scaleOf(vp)
	// In front: a background tab draws no frames (a screenshot waits for one
	// until its deadline) and its timers are slowed. The browser's clock is
	// the service zone's, as a family's phone is: what the server says in
	// that zone ("08:36까지") and what the page says in the browser's
	// ("23:36 갱신") agree on the screen and in screenshots.
	if err := chromedp.Run(ctx, page.BringToFront(), chromedp.ActionFunc(func(ctx context.Context) error {
		if err := emulation.SetTimezoneOverride(policy.DefaultZone).Do(ctx); err != nil {
			return err
		}
		return emulation.SetDeviceMetricsOverride(vp.Width, vp.Height, scale, vp.Mobile).Do(ctx)
	})); err != nil {
		t.Fatalf("browsertest: open a tab: %v", err)
	}
	return context.WithValue(ctx, viewportKey{}, vp)
}

// viewportKey holds a tab's Viewport in its context (Screenshot's).
type viewportKey struct{}

// scaleOf is the device pixel ratio a tab of vp is given.
func scaleOf(vp Viewport) float64 {
	if vp.Mobile {
		return 2
	}
	return 1
}

// Run runs actions in the tab ctx and fails t, naming what, on an error.
func Run(t testing.TB, ctx context.Context, what string, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Violation is one axe-core rule violated on a page.
type Violation struct {
	ID          string `json:"id"`
	Impact      string `json:"impact"`
	Description string `json:"description"`
	Help        string `json:"help"`
	Nodes       []struct {
		Target []any  `json:"target"`
		HTML   string `json:"html"`
	} `json:"nodes"`
}

func (v Violation) String() string {
	var targets []string
	for _, n := range v.Nodes {
		targets = append(targets, fmt.Sprint(n.Target...))
	}
	return fmt.Sprintf("%s (%s): %s at %s", v.ID, v.Impact, v.Help, strings.Join(targets, ", "))
}

// Axe runs axe-core in the page of ctx (injected through the DevTools
// protocol, which the page's Content-Security-Policy does not govern) and
// returns every violation.
func Axe(ctx context.Context) ([]Violation, error) {
	var loaded bool
	if err := chromedp.Run(ctx, chromedp.Evaluate(axeSource+";typeof axe==='object'", &loaded)); err != nil {
		return nil, fmt.Errorf("browsertest: inject axe-core: %w", err)
	}
	if !loaded {
		return nil, fmt.Errorf("browsertest: axe-core did not load")
	}
	var out string
	run := `axe.run(document, {resultTypes: ['violations']}).then(r => JSON.stringify(r.violations))`
	if err := chromedp.Run(ctx, chromedp.Evaluate(run, &out, func(p *runtime.EvaluateParams) *runtime.EvaluateParams {
		return p.WithAwaitPromise(true)
	})); err != nil {
		return nil, fmt.Errorf("browsertest: run axe-core: %w", err)
	}
	var vs []Violation
	if err := json.Unmarshal([]byte(out), &vs); err != nil {
		return nil, fmt.Errorf("browsertest: axe-core results: %w", err)
	}
	return vs, nil
}

// CheckAccessibility fails t when axe-core finds a serious or critical
// violation on the page of ctx; lesser ones are logged.
func CheckAccessibility(t testing.TB, ctx context.Context, page string) {
	t.Helper()
	vs, err := Axe(ctx)
	if err != nil {
		t.Fatalf("%s: %v", page, err)
	}
	for _, v := range vs {
		switch v.Impact {
		case "serious", "critical":
			t.Errorf("%s: accessibility: %s", page, v)
		default:
			t.Logf("%s: accessibility (minor): %s", page, v)
		}
	}
}

// Screenshot writes a PNG of the page of ctx to $DPCS_TEST_SCREENSHOTS/name.png
// when DPCS_TEST_SCREENSHOTS names a directory (make screenshots); otherwise
// it does nothing.
func Screenshot(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("DPCS_TEST_SCREENSHOTS")
	if dir == "" {
		return
	}
	var png []byte
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// FullScreenshot encodes PNG at quality 100 and JPEG below it; keep PNG.
	// The tab is brought to the front first: another tab may have been. A
	// page taller than its tab is taken in a tab as tall as the page, then
	// the tab is sized back: captured beyond the viewport, what is fixed at
	// the viewport's bottom (the family app's navigation) would be drawn
	// across the page's middle.
	vp, sized := ctx.Value(viewportKey{}).(Viewport)
	if err := chromedp.Run(ctx, page.BringToFront(), chromedp.ActionFunc(func(ctx context.Context) error {
		if !sized {
			return chromedp.FullScreenshot(&png, 100).Do(ctx)
		}
		_, _, _, _, _, content, err := page.GetLayoutMetrics().Do(ctx)
		if err != nil {
			return err
		}
		if h := int64(math.Ceil(content.Height)); h > vp.Height {
			if err := emulation.SetDeviceMetricsOverride(vp.Width, h, scaleOf(vp), vp.Mobile).Do(ctx); err != nil {
				return err
			}
			// A frame drawn at the new size before the capture.
			_, exp, err := runtime.Evaluate(`new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(() => ok(true))))`).WithAwaitPromise(true).Do(ctx)
			if err == nil && exp != nil {
				err = fmt.Errorf("a frame at the page's height: %s", exp.Text)
			}
			if err == nil {
				err = chromedp.FullScreenshot(&png, 100).Do(ctx)
			}
			return errors.Join(err, emulation.SetDeviceMetricsOverride(vp.Width, vp.Height, scaleOf(vp), vp.Mobile).Do(ctx))
		}
		return chromedp.FullScreenshot(&png, 100).Do(ctx)
	})); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
