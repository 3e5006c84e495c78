package quota

import (
	"time"

	"github.com/dabom/dpcs/policy"
)

// GrantOp is one step of a grant's life for one rating group: create (the
// first step), update, or release. ID dedupes the step (a retry returns the
// stored result); GrantID names the reservation across steps.
//
// The fields are the engine's (its branch defines this type with the
// engine): on merge, the engine's file replaces this one.
type GrantOp struct {
	ID, GrantID          string
	FamilyID, CustomerID int64
	// AppID and Category are what the rating group covers ("" = any
	// traffic).
	AppID     string
	Category  policy.Category
	Used      int64     // bytes used since the last step, charged now
	Requested int64     // bytes asked for next (0: the engine's default; ignored on release)
	Release   bool      // charge Used, return the rest, grant nothing
	At        time.Time // judged at this time (windows, days, months)
}

// GrantResult is the answer to one GrantOp (the fields service/charging and
// its tests read, as the engine names them).
type GrantResult struct {
	Duplicate        bool
	Decision         policy.Decision // Allowed, or why nothing (more) is granted
	Rule             string
	Granted          int64 // bytes reserved now for GrantID (0: blocked/released)
	Final            bool  // these are the last units (finalUnitIndication)
	Charged          int64 // bytes of Used charged
	Remaining, Total int64 // the family pool after the step
	Reserved         int64
	ValidUntil       time.Time // next boundary that could change the answer
	ThrottleKbps     int64
	Crossed          []int
	// Reclaim names the family's other grants holding more than their fair
	// share, asked to report again.
	Reclaim []string
}
