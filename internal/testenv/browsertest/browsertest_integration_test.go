//go:build integration

package browsertest_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/dabom/dpcs/internal/testenv/browsertest"
)

// The harness itself: the all-in-one serves the front-ends, a tab loads one,
// axe-core runs in it (and finds a planted violation), screenshots are
// written where asked.
func TestHarness(t *testing.T) {
	sys := browsertest.StartSystem(t)
	tok := sys.Token(t, sys.Owner)
	var fam struct {
		FamilyID int64 `json:"familyId"`
	}
	sys.Call(t, tok, http.MethodGet, "/families/100", nil, &fam)
	if fam.FamilyID != sys.FamilyID {
		t.Fatalf("dashboard of family %d, want %d", fam.FamilyID, sys.FamilyID)
	}
	b := browsertest.New(t)
	ctx := b.Page(t, browsertest.Phone)
	var title string
	browsertest.Run(t, ctx, "open the family app", chromedp.Navigate(sys.URL+"/app/"), chromedp.Title(&title))
	if title == "" {
		t.Fatal("the family app has no title")
	}
	browsertest.CheckAccessibility(t, ctx, "app")

	// A page with an image without alt text: axe-core must see it.
	browsertest.Run(t, ctx, "plant a violation", chromedp.Evaluate(
		`document.body.appendChild(Object.assign(document.createElement('img'), {src: 'data:image/png;base64,'}))`, nil))
	vs, err := browsertest.Axe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range vs {
		found = found || v.ID == "image-alt"
	}
	if !found {
		t.Fatalf("axe-core missed an image without alt text: %v", vs)
	}

	dir := t.TempDir()
	t.Setenv("DPCS_TEST_SCREENSHOTS", dir)
	browsertest.Screenshot(t, ctx, "harness")
	if st, err := os.Stat(filepath.Join(dir, "harness.png")); err != nil || st.Size() == 0 {
		t.Fatalf("screenshot not written: %v", err)
	}
}
