package simulate_test

import (
	"fmt"
	"time"

	"github.com/dabom/dpcs/simulate"
)

// The population is computed, not stored: any family can be looked up, and
// customer ids are derived from family ids.
func ExampleNewPopulation() {
	pop, err := simulate.NewPopulation(42) // 250,000 families, 1,000,000 members
	if err != nil {
		panic(err)
	}
	first, last := pop.FamilyIDs()
	fmt.Println(pop.NumFamilies(), pop.NumMembers(), first, last)
	f, _ := pop.Family(100)
	fmt.Println(f.Members[0].CustomerID, f.Members[0].Role)
	fid, idx := simulate.FamilyOf(1003)
	fmt.Println(fid, idx)
	// Output:
	// 250000 1000000 1 250000
	// 1000 OWNER
	// 100 3
}

// Provisioning walks the population family by family.
func ExamplePopulation_Families() {
	pop, _ := simulate.NewPopulation(42, simulate.WithFamilies(1000))
	members, owners := 0, 0
	for f := range pop.Families() {
		for _, m := range f.Members {
			members++
			if m.Role == "OWNER" {
				owners++
			}
		}
	}
	fmt.Println(members, owners)
	// Output: 4000 2000
}

// The same seed gives the same events; WithSeededIDs makes the ids
// reproducible too.
func ExampleGenerator() {
	pop, _ := simulate.NewPopulation(42)
	now := func() time.Time { return time.Date(2026, 2, 6, 5, 30, 0, 0, time.UTC) }
	a, _ := simulate.NewGenerator(pop, simulate.WithNow(now), simulate.WithSeededIDs())
	b, _ := simulate.NewGenerator(pop, simulate.WithNow(now), simulate.WithSeededIDs())
	ea, eb := a.Next(), b.Next()
	fmt.Println(ea.EventID == eb.EventID, ea.Payload.FamilyID == eb.Payload.FamilyID, ea.EventType)
	fmt.Println(ea.Payload.CustomerID/simulate.MaxFamilySize == ea.Payload.FamilyID)
	// Output:
	// true true DATA_USAGE
	// true
}

// Scenarios are data: steps with the decisions the system must make.
func ExampleScenarioByName() {
	s, _ := simulate.ScenarioByName("last-10mb", simulate.ScenarioConfig{})
	fmt.Println(s.Title, s.Setup.PoolBytes>>20, "MB")
	for _, st := range s.Steps {
		fmt.Printf("%-12s %s\n", st.Note, st.Expect.Decision)
	}
	// Output:
	// Last 10 MB 10 MB
	// dad 5 MB     ALLOWED
	// mom 3 MB     ALLOWED
	// child1 8 MB  BLOCKED_FAMILY_QUOTA
	// child2 4 MB  BLOCKED_FAMILY_QUOTA
}
