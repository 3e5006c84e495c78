package simulate

import (
	"errors"
	"fmt"
	"iter"
	"math"

	"github.com/dabom/dpcs/policy"
)

// ErrInvalid is wrapped by every error about a bad argument or option.
var ErrInvalid = errors.New("simulate: invalid argument")

// ErrNotFound is returned for a family or customer id outside the population.
var ErrNotFound = errors.New("simulate: not in the population")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// MaxFamilySize is the largest family, and the stride of the customer id
// scheme: member i (0-based) of family f has customer id f*MaxFamilySize+i.
const MaxFamilySize = 10

// MinFamilySize is the smallest family.
const MinFamilySize = 2

// CustomerID returns the customer id of member index (0-based) of family
// familyID: familyID*MaxFamilySize + index. Family 100 has customers
// 1000…1009 (as many as its size).
func CustomerID(familyID int64, index int) int64 {
	return familyID*MaxFamilySize + int64(index)
}

// FamilyOf splits a customer id into its family id and member index.
func FamilyOf(customerID int64) (familyID int64, index int) {
	return customerID / MaxFamilySize, int(customerID % MaxFamilySize)
}

// MemberType is a member's usage profile: it sets how often the member sends
// events and how large they are.
type MemberType uint8

// The member types.
const (
	Heavy  MemberType = iota + 1 // 15 % of members; relative event rate 6, events 2× the median size
	Normal                       // 55 % of members; relative event rate 2, events 1×
	Light                        // 30 % of members; relative event rate 0.5, events 0.5×
)

// MemberTypes lists the member types.
func MemberTypes() []MemberType { return []MemberType{Heavy, Normal, Light} }

func (t MemberType) String() string {
	switch t {
	case Heavy:
		return "HEAVY"
	case Normal:
		return "NORMAL"
	case Light:
		return "LIGHT"
	}
	return fmt.Sprintf("MemberType(%d)", uint8(t))
}

// MarshalText writes the name (HEAVY, NORMAL, LIGHT).
func (t MemberType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Population model parameters (documented in doc/simulator.md).
var (
	// sizeShares[k] is the share of families of size k (2…10); mean 3.975,
	// nudged to exactly the configured mean by moving single families.
	sizeShares = [MaxFamilySize + 1]float64{2: .22, 3: .25, 4: .22, 5: .13, 6: .08, 7: .05, 8: .03, 9: .015, 10: .005}
	// Activity tiers: share of families and their relative event rate per member.
	tierShares  = [...]float64{.40, .40, .15, .05}
	tierWeights = [...]float64{0.3, 1, 3, 10}
	// Member types: share and relative event rate.
	typeShares  = [...]float64{Heavy: .15, Normal: .55, Light: .30}
	typeWeights = [...]float64{Heavy: 6, Normal: 2, Light: 0.5}
	// Monthly family plans.
	planBytes  = [...]int64{10 << 30, 20 << 30, 30 << 30, 50 << 30, 100 << 30}
	planShares = [...]float64{.15, .25, .25, .25, .10}
	// Device models for deviceId.
	deviceModels = [...]string{"galaxy_s24", "galaxy_s23", "galaxy_a54", "galaxy_z_flip5", "iphone_15", "iphone_14", "iphone_13", "pixel_9", "pixel_8"}
)

const numTiers = len(tierShares)

// Family is one family of the population with its members.
type Family struct {
	ID int64
	// Members are the family's members, index 0 first; members 0 and 1 are
	// owners (the parents), the rest members.
	Members []Member
	// PlanBytes is the family's monthly data pool.
	PlanBytes int64
	// Activity is the family's relative event rate per member (0.3, 1, 3 or
	// 10): the skew between families.
	Activity float64
}

// Member is one member of the population.
type Member struct {
	CustomerID int64
	FamilyID   int64
	Index      int // 0-based position in the family
	Role       policy.Role
	Type       MemberType
	DeviceID   string // e.g. "device_galaxy_s24_3f9a1c"
}

// PopulationOption configures a Population.
type PopulationOption func(*popConfig) error

type popConfig struct {
	families int
	members  int // 0: 4 × families
	first    int64
}

// WithFamilies sets the number of families. Default: 250,000.
func WithFamilies(n int) PopulationOption {
	return func(c *popConfig) error {
		if n < 1 || n > 1e9 {
			return invalidf("families must be 1…1e9, got %d", n)
		}
		c.families = n
		return nil
	}
}

// WithMembers sets the total number of members, between 2 and 10 per family.
// Default: 4 × the number of families (1,000,000 for the default 250,000).
func WithMembers(n int) PopulationOption {
	return func(c *popConfig) error {
		if n < 1 {
			return invalidf("members must be positive, got %d", n)
		}
		c.members = n
		return nil
	}
}

// WithFirstFamilyID sets the id of the first family; families are numbered
// consecutively from it. Default: 1.
func WithFirstFamilyID(id int64) PopulationOption {
	return func(c *popConfig) error {
		if id < 1 || id > math.MaxInt64/(2*MaxFamilySize)-1e9 {
			return invalidf("first family id out of range: %d", id)
		}
		c.first = id
		return nil
	}
}

// Population is a deterministic, lazily generated population of families and
// members. Nothing per family is stored: every attribute is computed from the
// seed and the id on demand, so a million members cost a few hundred bytes.
// A Population is immutable and safe for concurrent use.
//
// Family sizes, activity tiers and plans are assigned by a keyed permutation
// of the family index, so their counts are exact (the total number of
// members is exactly the configured one), not merely expected.
type Population struct {
	seed     uint64
	first    int64
	families int
	members  int
	perm     feistel
	// cells partition the permuted family positions by (size, tier), size
	// major: cellEnd[i] is the end of cell i, cellSize/cellTier its attributes.
	cellEnd  []int
	cellSize []int
	cellTier []int
	// cellCum[i] is the cumulative sampling weight (families × size × tier
	// weight) of cells 0…i, for drawing a member proportional to activity.
	cellCum []float64
}

// NewPopulation returns the population of seed. The same seed and options
// always give the same population.
func NewPopulation(seed uint64, opts ...PopulationOption) (*Population, error) {
	c := popConfig{families: 250_000, first: 1}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if c.members == 0 {
		c.members = 4 * c.families
	}
	if c.members < MinFamilySize*c.families || c.members > MaxFamilySize*c.families {
		return nil, invalidf("%d members do not fit %d families of %d…%d", c.members, c.families, MinFamilySize, MaxFamilySize)
	}
	p := &Population{seed: seed, first: c.first, families: c.families, members: c.members,
		perm: newFeistel(uint64(c.families), mix(seed^0x5bd1e995))}
	p.layout()
	return p, nil
}

// layout computes the exact number of families per (size, tier) cell.
func (p *Population) layout() {
	sizes := apportion(p.families, sizeShares[:])
	// Move single families one size up or down until the member total is exact.
	total := 0
	for k, n := range sizes {
		total += k * n
	}
	for k := MinFamilySize; total < p.members; k = next(k, MinFamilySize, MaxFamilySize-1) {
		if sizes[k] > 0 {
			sizes[k]--
			sizes[k+1]++
			total++
		}
	}
	for k := MaxFamilySize; total > p.members; k = prev(k, MinFamilySize+1, MaxFamilySize) {
		if sizes[k] > 0 {
			sizes[k]--
			sizes[k-1]++
			total--
		}
	}
	end, cum := 0, 0.0
	for k := MinFamilySize; k <= MaxFamilySize; k++ {
		for t, n := range apportion(sizes[k], tierShares[:]) {
			if n == 0 {
				continue
			}
			end += n
			cum += float64(n*k) * tierWeights[t]
			p.cellEnd = append(p.cellEnd, end)
			p.cellSize = append(p.cellSize, k)
			p.cellTier = append(p.cellTier, t)
			p.cellCum = append(p.cellCum, cum)
		}
	}
}

func next(k, lo, hi int) int {
	if k >= hi {
		return lo
	}
	return k + 1
}

func prev(k, lo, hi int) int {
	if k <= lo {
		return hi
	}
	return k - 1
}

// apportion splits n into len(shares) integer parts proportional to shares
// (largest remainder), summing to exactly n.
func apportion(n int, shares []float64) []int {
	var sum float64
	for _, s := range shares {
		sum += s
	}
	out := make([]int, len(shares))
	rem := make([]float64, len(shares))
	given := 0
	for i, s := range shares {
		exact := float64(n) * s / sum
		out[i] = int(exact)
		rem[i] = exact - float64(out[i])
		given += out[i]
	}
	for ; given < n; given++ {
		best := -1
		for i := range rem {
			if shares[i] > 0 && (best < 0 || rem[i] > rem[best]) {
				best = i
			}
		}
		out[best]++
		rem[best] = -1
	}
	return out
}

// Seed returns the population's seed.
func (p *Population) Seed() uint64 { return p.seed }

// NumFamilies returns the number of families.
func (p *Population) NumFamilies() int { return p.families }

// NumMembers returns the number of members.
func (p *Population) NumMembers() int { return p.members }

// FamilyIDs returns the first and last family id; every id between them is a
// family.
func (p *Population) FamilyIDs() (first, last int64) {
	return p.first, p.first + int64(p.families) - 1
}

func (p *Population) index(familyID int64) (uint64, bool) {
	if familyID < p.first || familyID >= p.first+int64(p.families) {
		return 0, false
	}
	return uint64(familyID - p.first), true
}

// cell returns the (size, tier) cell of family index i.
func (p *Population) cell(i uint64) int {
	pos := int(p.perm.forward(i))
	lo, hi := 0, len(p.cellEnd)-1
	for lo < hi { // first cell whose end is past pos
		mid := (lo + hi) / 2
		if p.cellEnd[mid] > pos {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// FamilySize returns the number of members of family familyID.
func (p *Population) FamilySize(familyID int64) (int, error) {
	i, ok := p.index(familyID)
	if !ok {
		return 0, fmt.Errorf("%w: family %d", ErrNotFound, familyID)
	}
	return p.cellSize[p.cell(i)], nil
}

// Family returns family familyID with its members.
func (p *Population) Family(familyID int64) (Family, error) {
	i, ok := p.index(familyID)
	if !ok {
		return Family{}, fmt.Errorf("%w: family %d", ErrNotFound, familyID)
	}
	return p.family(familyID, p.cell(i)), nil
}

func (p *Population) family(fid int64, cell int) Family {
	f := Family{
		ID:        fid,
		Members:   make([]Member, p.cellSize[cell]),
		PlanBytes: planBytes[pick(unit(p.hash(kindPlan, uint64(fid))), planShares[:])],
		Activity:  tierWeights[p.cellTier[cell]],
	}
	for i := range f.Members {
		f.Members[i] = p.member(fid, i)
	}
	return f
}

// Member returns the member with customerID.
func (p *Population) Member(customerID int64) (Member, error) {
	fid, idx := FamilyOf(customerID)
	size, err := p.FamilySize(fid)
	if err != nil || customerID <= 0 || idx >= size {
		return Member{}, fmt.Errorf("%w: customer %d", ErrNotFound, customerID)
	}
	return p.member(fid, idx), nil
}

func (p *Population) member(fid int64, idx int) Member {
	cid := CustomerID(fid, idx)
	role := policy.RoleMember
	if idx < 2 {
		role = policy.RoleOwner
	}
	return Member{
		CustomerID: cid,
		FamilyID:   fid,
		Index:      idx,
		Role:       role,
		Type:       p.memberType(cid),
		DeviceID:   p.deviceID(cid),
	}
}

func (p *Population) deviceID(cid int64) string {
	h := p.hash(kindDevice, uint64(cid))
	const hex = "0123456789abcdef"
	model := deviceModels[h%uint64(len(deviceModels))]
	b := make([]byte, 0, len("device_")+len(model)+7)
	b = append(b, "device_"...)
	b = append(b, model...)
	b = append(b, '_')
	for i := 5; i >= 0; i-- {
		b = append(b, hex[(h>>(32+4*uint(i)))&0xf])
	}
	return string(b)
}

func (p *Population) memberType(cid int64) MemberType {
	return MemberType(pick(unit(p.hash(kindType, uint64(cid))), typeShares[:]))
}

// Families iterates over every family in id order. It is lazy: one family is
// built per step, so provisioning a million members needs no more memory than
// one family.
func (p *Population) Families() iter.Seq[Family] {
	return p.FamilyRange(p.FamilyIDs())
}

// FamilyRange iterates over families first…last (inclusive, clipped to the
// population), e.g. one shard of a parallel provisioning job.
func (p *Population) FamilyRange(first, last int64) iter.Seq[Family] {
	lo, hi := p.FamilyIDs()
	first, last = max(first, lo), min(last, hi)
	return func(yield func(Family) bool) {
		for fid := first; fid <= last; fid++ {
			if !yield(p.family(fid, p.cell(uint64(fid-p.first)))) {
				return
			}
		}
	}
}

// Members iterates over every member, family by family.
func (p *Population) Members() iter.Seq[Member] {
	return func(yield func(Member) bool) {
		for f := range p.Families() {
			for _, m := range f.Members {
				if !yield(m) {
					return
				}
			}
		}
	}
}

// hash kinds: independent streams of per-id randomness.
const (
	kindType uint64 = iota + 1
	kindDevice
	kindPlan
)

func (p *Population) hash(kind, id uint64) uint64 {
	return mix(p.seed ^ mix(kind*0x9e3779b97f4a7c15^id))
}

// mix is the splitmix64 finalizer: a fast bijective 64-bit hash.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// unit maps a hash to [0, 1).
func unit(h uint64) float64 { return float64(h>>11) / (1 << 53) }

// pick returns the index i with cumulative share covering u ∈ [0, 1); zero
// shares are never picked.
func pick(u float64, shares []float64) int {
	last := 0
	for i, s := range shares {
		if s <= 0 {
			continue
		}
		if u < s {
			return i
		}
		u -= s
		last = i
	}
	return last
}

// feistel is a keyed bijection of [0, n): a balanced Feistel network on the
// smallest even bit width covering n, with cycle walking.
type feistel struct {
	n    uint64
	half uint
	mask uint64
	key  uint64
}

func newFeistel(n, key uint64) feistel {
	bits := uint(2)
	for uint64(1)<<bits < n {
		bits++
	}
	half := (bits + 1) / 2
	return feistel{n: n, half: half, mask: 1<<half - 1, key: key}
}

const feistelRounds = 4

func (f feistel) round(r int, x uint64) uint64 {
	return mix(f.key^uint64(r)<<56^x) & f.mask
}

func (f feistel) forward(x uint64) uint64 {
	for {
		l, r := x>>f.half, x&f.mask
		for i := range feistelRounds {
			l, r = r, l^f.round(i, r)
		}
		x = l<<f.half | r
		if x < f.n {
			return x
		}
	}
}

func (f feistel) inverse(x uint64) uint64 {
	for {
		l, r := x>>f.half, x&f.mask
		for i := feistelRounds - 1; i >= 0; i-- {
			l, r = r^f.round(i, l), l
		}
		x = l<<f.half | r
		if x < f.n {
			return x
		}
	}
}
