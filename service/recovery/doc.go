// Package recovery keeps the quota state in Redis trustworthy
// (doc/architecture.md, "Never trust Redis blindly"): it rebuilds it from
// SQL, the truth, when it came back empty, from an older snapshot or from
// another rebuild's generation.
//
//   - NewDoor builds the door (judge.State) every deployable with SQL
//     judges and writes through: family writes marked (Generations as the
//     mark store), re-armed thresholds recorded, families restored on their
//     first touch after a rebuild (FamilySource).
//   - Guard is the judges' judge.StateGuard: it knows the generation SQL
//     names and, when the engine reports the state stale, takes the rebuild
//     lease, waits until SQL holds every judged event and names a new
//     generation (NewDeployable builds one for a deployable; Bootstrap
//     rebuilds at start, RebuildNow is an operator's `server rebuild`).
//   - Rebuild restores families from SQL (store.Store.ReadFamilies) through
//     the door; Report lists the ones that could not be restored.
//   - CheckInvariants compares Redis with SQL after a run (the chaos
//     tests').
//
// It reads SQL through service/store and writes Redis only through the
// door; it links no HTTP (internal/sdkdeps).
package recovery
