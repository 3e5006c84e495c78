package recovery

import (
	"errors"

	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/store"
)

// NewDoor returns the door to the quota state (judge.State) that a
// deployable judges and writes through, made safe beside a rebuild
// (doc/architecture.md, "Never trust Redis blindly") from the SQL store st:
//
//   - every family write is marked, and every judgement checks the marks
//     recorded in SQL (judge.WithMarkStore, Generations), so a Redis node
//     that lost a write answered to a caller is stale before the next
//     decision on any path;
//   - the thresholds a pool change or a restore re-armed are recorded
//     (judge.WithRearmStore), so a rebuild does not take them for fired;
//   - after a rebuild each family is restored from SQL on its first touch,
//     judgement, write or read (judge.WithFamilySource, FamilySource), so
//     judging resumes before every family is restored.
//
// opts add to these (judge.WithTouchHook). Every deployable with SQL (the
// all-in-one, the server, the processor) builds its door here; a door
// without SQL is judge.NewState's.
func NewDoor(eng judge.Engine, st *store.Store, opts ...judge.StateOption) (*judge.State, error) {
	if st == nil {
		return nil, errors.New("recovery: nil store")
	}
	return judge.NewState(eng, append([]judge.StateOption{
		judge.WithMarkStore(NewGenerations(st)),
		judge.WithRearmStore(st),
		judge.WithFamilySource(NewFamilySource(st, eng)),
	}, opts...)...)
}
