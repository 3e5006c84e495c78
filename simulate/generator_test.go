package simulate

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
)

func mustGenerator(tb testing.TB, p *Population, opts ...GeneratorOption) *Generator {
	tb.Helper()
	g, err := NewGenerator(p, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return g
}

func fixedNow() time.Time { return time.Date(2026, 2, 6, 5, 30, 0, 0, time.UTC) }

var uuidV7 = regexp.MustCompile(`^evt_[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// Same seed ⇒ same events (ids too with WithSeededIDs); another stream seed
// ⇒ other events; every event encodes and decodes.
func TestGeneratorDeterministic(t *testing.T) {
	p := mustPopulation(t, 11)
	gen := func(seed uint64) []Event {
		g := mustGenerator(t, p, WithStreamSeed(seed), WithSeededIDs(), WithNow(fixedNow))
		out := make([]Event, 500)
		for i := range out {
			out[i] = g.Next()
		}
		return out
	}
	a, b, c := gen(1), gen(1), gen(2)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("same seed, different events:\n%s", diff)
	}
	if cmp.Equal(a, c) {
		t.Fatal("different stream seeds gave the same events")
	}
	ids := map[string]bool{}
	for _, ev := range a {
		if !uuidV7.MatchString(ev.EventID) || ids[ev.EventID] {
			t.Fatalf("bad or repeated id %q", ev.EventID)
		}
		// A seeded id is a v7 UUID of the event's time.
		if ms := strings.ReplaceAll(ev.EventID[4:17], "-", ""); ms != fmt.Sprintf("%012x", fixedNow().UnixMilli()) {
			t.Fatalf("id %q: time %s, want the event's %012x", ev.EventID, ms, fixedNow().UnixMilli())
		}
		ids[ev.EventID] = true
		data, err := envelope.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		back, err := envelope.DecodeAs[envelope.UsagePayload](data)
		if err != nil {
			t.Fatal(err)
		}
		if back.Payload.CustomerID != ev.Payload.CustomerID || !back.Timestamp.Equal(fixedNow()) {
			t.Fatalf("round trip: %+v", back)
		}
		m, err := p.Member(ev.Payload.CustomerID)
		if err != nil || m.FamilyID != ev.Payload.FamilyID || ev.Payload.Metadata["deviceId"] != m.DeviceID {
			t.Fatalf("event for %d/%d: member %+v %v", ev.Payload.FamilyID, ev.Payload.CustomerID, m, err)
		}
	}
	// envelope.NewID's ids by default: v7, time-ordered.
	g := mustGenerator(t, p)
	if x, y := g.Next().EventID, g.Next().EventID; x >= y || !uuidV7.MatchString(x) {
		t.Errorf("ids %q %q", x, y)
	}
	if g.Population() != p {
		t.Error("Population()")
	}
}

// Over many events: category shares, member-type shares weighted by rate,
// activity skew between families, sizes and network types.
func TestGeneratorDistributions(t *testing.T) {
	p := mustPopulation(t, 5)
	g := mustGenerator(t, p, WithSeededIDs(), WithNow(fixedNow))
	catalog := policy.NewCatalog(policy.DefaultApps())
	const n = 200_000
	cats := map[policy.Category]int{}
	types := map[MemberType]int{}
	tiers := map[float64]int{}
	nets := map[string]int{}
	var videoBytes []int64
	for range n {
		ev := g.Next()
		pl := ev.Payload
		cat := catalog.Category(pl.AppID)
		if cat == "" {
			t.Fatalf("app %q not in the catalog", pl.AppID)
		}
		cats[cat]++
		m, _ := p.Member(pl.CustomerID)
		types[m.Type]++
		f, _ := p.Family(pl.FamilyID)
		tiers[f.Activity]++
		nets[pl.Metadata["networkType"].(string)]++
		if pl.BytesUsed < minEventBytes || pl.BytesUsed > maxEventBytes {
			t.Fatalf("bytes %d", pl.BytesUsed)
		}
		if cat == policy.CategoryVideo {
			videoBytes = append(videoBytes, pl.BytesUsed)
		}
	}
	for c, m := range categoryModel {
		if got := float64(cats[c]) / n; !within(got, m.share, 0.005) {
			t.Errorf("%s share %.4f, want %.2f", c, got, m.share)
		}
	}
	// Event share of a type ∝ member share × rate.
	var norm float64
	for _, ty := range MemberTypes() {
		norm += typeShares[ty] * typeWeights[ty]
	}
	for _, ty := range MemberTypes() {
		want := typeShares[ty] * typeWeights[ty] / norm
		if got := float64(types[ty]) / n; !within(got, want, 0.01) {
			t.Errorf("%s event share %.4f, want ≈ %.3f", ty, got, want)
		}
	}
	// Event share of a tier ∝ family share × weight: the busiest 5 % of
	// families make about a third of the traffic.
	norm = 0
	for i := range tierWeights {
		norm += tierShares[i] * tierWeights[i]
	}
	for i, w := range tierWeights {
		want := tierShares[i] * w / norm
		if got := float64(tiers[w]) / n; !within(got, want, 0.01) {
			t.Errorf("tier %v event share %.4f, want ≈ %.3f", w, got, want)
		}
	}
	if got := float64(nets["5G"]) / n; !within(got, networkShares[0], 0.01) {
		t.Errorf("5G share %.3f", got)
	}
	// Video sizes are heavy-tailed: the mean is well above the median.
	var sum int64
	big := 0
	for _, b := range videoBytes {
		sum += b
		if b > 40<<20 {
			big++
		}
	}
	mean := float64(sum) / float64(len(videoBytes))
	if mean < 5<<20 || big == 0 {
		t.Errorf("video mean %.0f bytes, %d events over 40 MiB", mean, big)
	}
}

// WithDay spreads a day's events over the hours following the curve.
func TestGeneratorHourlyCurve(t *testing.T) {
	loc, _ := policy.LoadZone(policy.DefaultZone)
	day := time.Date(2026, 2, 6, 15, 0, 0, 0, loc)
	g := mustGenerator(t, mustPopulation(t, 2, WithFamilies(1000)), WithDay(day), WithLocation(loc), WithCurve(DefaultCurve()))
	const n = 120_000
	var hours [24]int
	for range n {
		at := g.Next().Timestamp.In(loc)
		if at.Year() != 2026 || at.YearDay() != day.YearDay() {
			t.Fatalf("event at %s, outside the day", at)
		}
		hours[at.Hour()]++
	}
	c := DefaultCurve()
	for h := range 24 {
		want := c.Factor(h) / 24
		if got := float64(hours[h]) / n; !within(got, want, 0.003) {
			t.Errorf("hour %02d share %.4f, want ≈ %.4f", h, got, want)
		}
	}
	if hours[21] < 5*hours[4] {
		t.Errorf("21:00 (%d) not well above 04:00 (%d)", hours[21], hours[4])
	}
}

func TestCurve(t *testing.T) {
	c := DefaultCurve()
	var sum float64
	for h := range 24 {
		sum += c.Factor(h)
	}
	if !within(sum, 24, 1e-9) {
		t.Errorf("factors sum to %v", sum)
	}
	loc, _ := policy.LoadZone(policy.DefaultZone)
	// 12:00 UTC is 21:00 KST, the peak.
	if got := c.FactorAt(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC), loc); got != c.Factor(21) || got < 1.5 {
		t.Errorf("FactorAt = %v", got)
	}
	if got := c.FactorAt(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC), nil); got != c.Factor(21) {
		t.Errorf("FactorAt(t, nil) = %v, want the Asia/Seoul factor %v", got, c.Factor(21))
	}
	if (Curve{}).Factor(3) != 1 || c.Factor(24) != 1 {
		t.Error("degenerate Factor")
	}
}

func TestGeneratorOptions(t *testing.T) {
	p := mustPopulation(t, 1, WithFamilies(10))
	bad := []GeneratorOption{
		WithNow(nil), WithDay(time.Time{}), WithLocation(nil), WithCurve(Curve{}), WithCurve(Curve{-1, 2}),
		WithApps(nil), WithApps([]policy.App{{ID: "x", Category: "FOOD"}}),
	}
	for i, o := range bad {
		if _, err := NewGenerator(p, o); !errors.Is(err, ErrInvalid) {
			t.Errorf("option %d: %v", i, err)
		}
	}
	if _, err := NewGenerator(nil); !errors.Is(err, ErrInvalid) {
		t.Error("nil population accepted")
	}
	// A catalog of one category uses only it.
	g := mustGenerator(t, p, nil, WithApps([]policy.App{{ID: "com.spotify.music", Category: policy.CategoryMusic}}))
	for range 100 {
		if app := g.Next().Payload.AppID; app != "com.spotify.music" {
			t.Fatalf("app %q", app)
		}
	}
}
