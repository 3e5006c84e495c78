package simulate

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
)

// Event is a usage event as the simulator sends it.
type Event = envelope.Envelope[envelope.UsagePayload]

// Curve is an hour-of-day traffic curve: relative weights of the 24 hours
// of a day in the service time zone.
type Curve [24]float64

// DefaultCurve is a mobile-carrier day seen from Korea: quiet from 02:00 to
// 05:00 (a quarter to 0.4 of the mean), a morning rise, a lunch bump and the
// peak from 20:00 to 22:00 (about 1.6× the mean). See doc/simulator.md.
func DefaultCurve() Curve {
	return Curve{
		0.90, 0.60, 0.40, 0.30, 0.25, 0.30, 0.50, 0.80, 1.00, 0.95, 0.90, 0.95,
		1.15, 1.00, 0.95, 1.00, 1.05, 1.15, 1.25, 1.35, 1.50, 1.60, 1.50, 1.20,
	}
}

// Factor returns the weight of hour h relative to the curve's mean, so that a
// rate multiplied by Factor over a whole day averages the rate. It is 1 for
// a curve without positive weights.
func (c Curve) Factor(h int) float64 {
	var sum float64
	for _, w := range c {
		sum += max(w, 0)
	}
	if sum == 0 || h < 0 || h > 23 {
		return 1
	}
	return max(c[h], 0) * 24 / sum
}

// FactorAt is Factor of the hour of t in loc (nil: policy.DefaultZone).
func (c Curve) FactorAt(t time.Time, loc *time.Location) float64 {
	if loc == nil {
		loc, _ = policy.LoadZone(policy.DefaultZone) // never fails for the default
	}
	return c.Factor(t.In(loc).Hour())
}

func (c Curve) valid() bool {
	var sum float64
	for _, w := range c {
		if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
			return false
		}
		sum += w
	}
	return sum > 0
}

// Category model (doc/simulator.md): share of events, median bytes of one
// event, and the log-normal sigma of its size.
var categoryModel = map[policy.Category]struct {
	share  float64
	median float64
	sigma  float64
}{
	policy.CategoryVideo:     {.30, 4 << 20, 1.0},
	policy.CategorySocial:    {.20, 1 << 20, 1.0},
	policy.CategoryMessaging: {.18, 32 << 10, 1.3},
	policy.CategoryWeb:       {.14, 256 << 10, 1.1},
	policy.CategoryGame:      {.10, 512 << 10, 1.2},
	policy.CategoryMusic:     {.08, 1 << 20, 0.6},
}

// Size multipliers by member type, and the bounds of one event's size.
var typeSize = [...]float64{Heavy: 2, Normal: 1, Light: 0.5}

const (
	minEventBytes = 1 << 10
	maxEventBytes = 1 << 30
)

// Network types and their shares.
var (
	networkTypes  = [...]string{"5G", "LTE", "3G"}
	networkShares = [...]float64{.55, .42, .03}
)

// GeneratorOption configures a Generator.
type GeneratorOption func(*Generator) error

// WithStreamSeed seeds the event stream (which member, app, size, …) apart
// from the population. Default: the population's seed.
func WithStreamSeed(seed uint64) GeneratorOption {
	return func(g *Generator) error { g.streamSeed = seed; return nil }
}

// WithNow sets the clock that stamps events. Default: time.Now, truncated to
// milliseconds.
func WithNow(now func() time.Time) GeneratorOption {
	return func(g *Generator) error {
		if now == nil {
			return invalidf("nil clock")
		}
		g.now = now
		return nil
	}
}

// WithDay stamps events not with the clock but at times spread over the
// calendar day (in the generator's location) that contains day, hour by hour
// following the curve: a day of history to backfill. Default: off.
func WithDay(day time.Time) GeneratorOption {
	return func(g *Generator) error {
		if day.IsZero() {
			return invalidf("zero day")
		}
		g.day = day
		return nil
	}
}

// WithLocation sets the service time zone used by WithDay. Default:
// Asia/Seoul.
func WithLocation(loc *time.Location) GeneratorOption {
	return func(g *Generator) error {
		if loc == nil {
			return invalidf("nil location")
		}
		g.loc = loc
		return nil
	}
}

// WithCurve sets the hour-of-day curve used by WithDay. Default:
// DefaultCurve.
func WithCurve(c Curve) GeneratorOption {
	return func(g *Generator) error {
		if !c.valid() {
			return invalidf("curve needs non-negative finite weights with a positive sum")
		}
		g.curve = c
		return nil
	}
}

// WithSeededIDs draws event ids (still "evt_" + a version 7 UUID of the
// event's timestamp, time-ordered) from the seeded stream, so the same seed
// and clock (WithNow, WithDay) give the same ids. Only for tests and
// reproductions: a consumer deduplicates by eventId, so a second run with the
// same seed and clock would be ignored as replays. Default: envelope.NewID's
// time-ordered ids of the moment each event is made.
func WithSeededIDs() GeneratorOption {
	return func(g *Generator) error { g.seededIDs = true; return nil }
}

// WithApps sets the app catalog events draw from; every category must be
// valid, and a category without apps is not used. Default:
// policy.DefaultApps().
func WithApps(apps []policy.App) GeneratorOption {
	return func(g *Generator) error {
		if len(apps) == 0 {
			return invalidf("empty app catalog")
		}
		for _, a := range apps {
			if a.ID == "" || !a.Category.Valid() {
				return invalidf("bad app %q (category %q)", a.ID, a.Category)
			}
		}
		g.apps = slices.Clone(apps)
		return nil
	}
}

// Generator draws usage events from a Population: a member chosen in
// proportion to its family's activity and its type's event rate, an app by
// category share (and popularity within the category), a log-normal size, the
// member's device and a network type. It is deterministic: the same
// population, stream seed and clock give the same events. A Generator is not
// safe for concurrent use; give each goroutine its own.
type Generator struct {
	pop        *Population
	rng        *rand.Rand
	streamSeed uint64
	now        func() time.Time
	day        time.Time
	loc        *time.Location
	curve      Curve
	seededIDs  bool
	apps       []policy.App

	maxTypeWeight float64
	catIDs        []policy.Category
	catCum        []float64  // cumulative category shares (normalised)
	catApps       [][]string // apps by category index
	catAppCum     [][]float64
	hourCum       [24]float64
	dayStart      time.Time
}

// NewGenerator returns a generator over pop.
func NewGenerator(pop *Population, opts ...GeneratorOption) (*Generator, error) {
	if pop == nil {
		return nil, invalidf("nil population")
	}
	g := &Generator{
		pop:        pop,
		streamSeed: pop.seed,
		now:        func() time.Time { return time.Now().Truncate(time.Millisecond) },
		curve:      DefaultCurve(),
		apps:       policy.DefaultApps(),
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(g); err != nil {
			return nil, err
		}
	}
	if g.loc == nil {
		loc, err := policy.LoadZone(policy.DefaultZone)
		if err != nil {
			return nil, err
		}
		g.loc = loc
	}
	g.rng = rand.New(rand.NewPCG(g.streamSeed, mix(g.streamSeed^0x2545f4914f6cdd1d)))
	for _, t := range MemberTypes() {
		g.maxTypeWeight = max(g.maxTypeWeight, typeWeights[t])
	}
	var total float64
	for _, c := range policy.Categories() {
		var apps []string
		var cum []float64
		var w float64
		for _, a := range g.apps {
			if a.Category == c {
				w += 1 / float64(len(apps)+1) // Zipf: the first app of a category is the most used
				apps = append(apps, a.ID)
				cum = append(cum, w)
			}
		}
		if len(apps) == 0 {
			continue
		}
		total += categoryModel[c].share
		g.catIDs = append(g.catIDs, c)
		g.catCum = append(g.catCum, total)
		g.catApps = append(g.catApps, apps)
		g.catAppCum = append(g.catAppCum, cum)
	}
	if !g.day.IsZero() {
		d := g.day.In(g.loc)
		g.dayStart = time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, g.loc)
		var cum float64
		for h := range 24 {
			cum += g.curve[h]
			g.hourCum[h] = cum
		}
	}
	return g, nil
}

// Population returns the generator's population.
func (g *Generator) Population() *Population { return g.pop }

// Next returns the next event.
func (g *Generator) Next() Event {
	fid, cid, typ := g.pickMember()
	ci := searchCum(g.catCum, g.rng.Float64()*g.catCum[len(g.catCum)-1])
	cat := g.catIDs[ci]
	appCum := g.catAppCum[ci]
	app := g.catApps[ci][searchCum(appCum, g.rng.Float64()*appCum[len(appCum)-1])]
	m := categoryModel[cat]
	size := m.median * typeSize[typ] * math.Exp(m.sigma*g.rng.NormFloat64())
	bytes := int64(min(max(size, minEventBytes), maxEventBytes))
	network := networkTypes[pick(g.rng.Float64(), networkShares[:])]
	var at time.Time
	if g.dayStart.IsZero() {
		at = g.now()
	} else {
		h := searchCum(g.hourCum[:], g.rng.Float64()*g.hourCum[23])
		at = g.dayStart.Add(time.Duration(h)*time.Hour + time.Duration(g.rng.Int64N(int64(time.Hour/time.Millisecond)))*time.Millisecond)
	}
	return envelope.New(g.id(at), at, envelope.UsagePayload{
		FamilyID:   fid,
		CustomerID: cid,
		AppID:      app,
		BytesUsed:  bytes,
		Metadata: map[string]any{
			"deviceId":    g.pop.deviceID(cid),
			"networkType": network,
		},
	})
}

// pickMember draws a member with probability proportional to its family's
// activity × its type's event rate: a (size, tier) cell by weight, a family
// uniformly in it, a member uniformly in the family, then rejection on the
// type's rate (accepts about 36 % of draws).
func (g *Generator) pickMember() (fid, cid int64, typ MemberType) {
	p := g.pop
	for {
		cell := searchCum(p.cellCum, g.rng.Float64()*p.cellCum[len(p.cellCum)-1])
		lo := 0
		if cell > 0 {
			lo = p.cellEnd[cell-1]
		}
		pos := lo + g.rng.IntN(p.cellEnd[cell]-lo)
		fid = p.first + int64(p.perm.inverse(uint64(pos)))
		cid = CustomerID(fid, g.rng.IntN(p.cellSize[cell]))
		typ = p.memberType(cid)
		if g.rng.Float64()*g.maxTypeWeight < typeWeights[typ] {
			return fid, cid, typ
		}
	}
}

// id is an event's id: envelope.NewID, or with WithSeededIDs a version 7
// UUID of at (its 48-bit Unix milliseconds) whose other bits come from the
// seeded stream.
func (g *Generator) id(at time.Time) string {
	if !g.seededIDs {
		return envelope.NewID(envelope.PrefixEvent)
	}
	var u uuid.UUID
	a, b := g.rng.Uint64(), g.rng.Uint64()
	for i := range 8 {
		u[i], u[8+i] = byte(a>>(8*i)), byte(b>>(8*i))
	}
	ms := uint64(at.UnixMilli())
	for i := range 6 {
		u[i] = byte(ms >> (8 * (5 - i)))
	}
	u[6] = u[6]&0x0f | 0x70 // version 7
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return envelope.PrefixEvent + u.String()
}

// searchCum returns the first index whose cumulative weight exceeds x.
func searchCum(cum []float64, x float64) int {
	lo, hi := 0, len(cum)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if cum[mid] > x {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
