package simulate

import (
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/dabom/dpcs/policy"
)

func mustPopulation(tb testing.TB, seed uint64, opts ...PopulationOption) *Population {
	tb.Helper()
	p, err := NewPopulation(seed, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func within(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// The default population: 250,000 families, exactly 1,000,000 members, sizes
// 2–10 with the documented shares, member types and activity tiers in their
// shares, valid roles and devices.
func TestPopulationDistributions(t *testing.T) {
	p := mustPopulation(t, 1)
	if p.NumFamilies() != 250_000 || p.NumMembers() != 1_000_000 {
		t.Fatalf("families %d members %d", p.NumFamilies(), p.NumMembers())
	}
	var sizes [MaxFamilySize + 1]int
	var types [4]int
	tiers := map[float64]int{}
	plans := map[int64]int{}
	members, families := 0, 0
	for f := range p.Families() {
		families++
		n := len(f.Members)
		if n < MinFamilySize || n > MaxFamilySize {
			t.Fatalf("family %d has %d members", f.ID, n)
		}
		sizes[n]++
		tiers[f.Activity]++
		plans[f.PlanBytes]++
		for i, m := range f.Members {
			members++
			types[m.Type]++
			if m.CustomerID != CustomerID(f.ID, i) || m.FamilyID != f.ID || m.Index != i {
				t.Fatalf("member %d of family %d: %+v", i, f.ID, m)
			}
			if want := policy.RoleMember; i < 2 && m.Role != policy.RoleOwner || i >= 2 && m.Role != want {
				t.Fatalf("member %d role %s", i, m.Role)
			}
		}
	}
	if families != 250_000 || members != 1_000_000 {
		t.Fatalf("iterated %d families, %d members", families, members)
	}
	mean := float64(members) / float64(families)
	if mean != 4 {
		t.Errorf("mean family size %v, want 4", mean)
	}
	for k := MinFamilySize; k <= MaxFamilySize; k++ {
		if got := float64(sizes[k]) / float64(families); !within(got, sizeShares[k], 0.01) {
			t.Errorf("size %d share %.4f, want ≈ %.3f", k, got, sizeShares[k])
		}
	}
	for _, ty := range MemberTypes() {
		if got := float64(types[ty]) / float64(members); !within(got, typeShares[ty], 0.005) {
			t.Errorf("%s share %.4f, want ≈ %.2f", ty, got, typeShares[ty])
		}
	}
	for i, w := range tierWeights {
		if got := float64(tiers[w]) / float64(families); !within(got, tierShares[i], 0.001) {
			t.Errorf("tier %v share %.4f, want %.2f", w, got, tierShares[i])
		}
	}
	for i, b := range planBytes {
		if got := float64(plans[b]) / float64(families); !within(got, planShares[i], 0.01) {
			t.Errorf("plan %d share %.4f, want ≈ %.2f", b, got, planShares[i])
		}
	}
}

func TestPopulationDeterministicAndLazy(t *testing.T) {
	a, b, c := mustPopulation(t, 7), mustPopulation(t, 7), mustPopulation(t, 8)
	same, diff := 0, 0
	for fid := int64(1); fid <= 2000; fid++ {
		fa, _ := a.Family(fid)
		fb, _ := b.Family(fid)
		fc, _ := c.Family(fid)
		if diff := cmp.Diff(fa, fb); diff != "" {
			t.Fatalf("family %d differs for the same seed:\n%s", fid, diff)
		}
		if cmp.Equal(fa, fc) {
			same++
		} else {
			diff++
		}
	}
	if diff < 1500 {
		t.Errorf("seeds 7 and 8 give %d equal families of 2000", same)
	}
	// A million members are a handful of slices, not per-member state.
	allocs := testing.AllocsPerRun(3, func() { mustPopulation(t, 1, WithFamilies(250_000)) })
	if allocs > 200 {
		t.Errorf("NewPopulation made %v allocations", allocs)
	}
}

func TestPopulationLookups(t *testing.T) {
	p := mustPopulation(t, 3, WithFamilies(1000), WithMembers(3500), WithFirstFamilyID(500))
	first, last := p.FamilyIDs()
	if first != 500 || last != 1499 || p.NumMembers() != 3500 {
		t.Fatalf("ids %d–%d, members %d", first, last, p.NumMembers())
	}
	total := 0
	for m := range p.Members() {
		total++
		got, err := p.Member(m.CustomerID)
		if err != nil || !cmp.Equal(got, m) {
			t.Fatalf("Member(%d) = %+v, %v; want %+v", m.CustomerID, got, err, m)
		}
		if fid, idx := FamilyOf(m.CustomerID); fid != m.FamilyID || idx != m.Index {
			t.Fatalf("FamilyOf(%d) = %d, %d", m.CustomerID, fid, idx)
		}
	}
	if total != 3500 {
		t.Fatalf("Members yielded %d", total)
	}
	f, _ := p.Family(700)
	if n, _ := p.FamilySize(700); n != len(f.Members) {
		t.Errorf("FamilySize %d, family has %d", n, len(f.Members))
	}
	for _, fid := range []int64{0, 499, 1500} {
		if _, err := p.Family(fid); !errors.Is(err, ErrNotFound) {
			t.Errorf("Family(%d): %v", fid, err)
		}
		if _, err := p.FamilySize(fid); !errors.Is(err, ErrNotFound) {
			t.Errorf("FamilySize(%d): %v", fid, err)
		}
	}
	for _, cid := range []int64{0, -5, CustomerID(700, len(f.Members)), CustomerID(2000, 0)} {
		if _, err := p.Member(cid); !errors.Is(err, ErrNotFound) {
			t.Errorf("Member(%d): %v", cid, err)
		}
	}
	// Ranges clip and stop early.
	var ids []int64
	for f := range p.FamilyRange(1497, 5000) {
		ids = append(ids, f.ID)
	}
	if diff := cmp.Diff([]int64{1497, 1498, 1499}, ids); diff != "" {
		t.Error(diff)
	}
	n := 0
	for range p.Families() {
		if n++; n == 3 {
			break
		}
	}
	for m := range p.Members() {
		_ = m
		break
	}
}

func TestPopulationExtremesAndOptions(t *testing.T) {
	for _, c := range []struct{ families, members, size int }{{10, 20, 2}, {10, 100, 10}, {1, 4, 4}, {3, 7, 0}} {
		p := mustPopulation(t, 1, WithFamilies(c.families), WithMembers(c.members))
		sum := 0
		for f := range p.Families() {
			sum += len(f.Members)
			if c.size != 0 && len(f.Members) != c.size {
				t.Errorf("%+v: family of %d", c, len(f.Members))
			}
		}
		if sum != c.members {
			t.Errorf("%+v: %d members", c, sum)
		}
	}
	bad := [][]PopulationOption{
		{WithFamilies(0)}, {WithMembers(0)}, {WithFirstFamilyID(0)},
		{WithFamilies(10), WithMembers(19)}, {WithFamilies(10), WithMembers(101)},
	}
	for i, opts := range bad {
		if _, err := NewPopulation(1, opts...); !errors.Is(err, ErrInvalid) {
			t.Errorf("case %d: %v", i, err)
		}
	}
	if _, err := NewPopulation(1, nil); err != nil {
		t.Error(err)
	}
	if MemberType(9).String() != "MemberType(9)" || Heavy.String() != "HEAVY" {
		t.Error("MemberType.String")
	}
	if b, _ := Light.MarshalText(); string(b) != "LIGHT" {
		t.Error("MarshalText")
	}
}

// The keyed permutation is a bijection of [0, n) and inverse undoes forward.
func TestFeistelBijection(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Uint64Range(1, 5000).Draw(t, "n")
		f := newFeistel(n, rapid.Uint64().Draw(t, "key"))
		seen := make([]bool, n)
		for x := range n {
			y := f.forward(x)
			if y >= n || seen[y] {
				t.Fatalf("forward(%d) = %d: out of range or repeated", x, y)
			}
			seen[y] = true
			if back := f.inverse(y); back != x {
				t.Fatalf("inverse(forward(%d)) = %d", x, back)
			}
		}
	})
}

func TestApportion(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 1_000_000).Draw(t, "n")
		shares := rapid.SliceOfN(rapid.Float64Range(0, 1), 1, 10).Draw(t, "shares")
		shares[0] += 0.01
		sum := 0
		for _, v := range apportion(n, shares) {
			sum += v
		}
		if sum != n {
			t.Fatalf("apportion(%d) sums to %d", n, sum)
		}
	})
}
