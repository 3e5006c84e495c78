package quota

import (
	"time"

	"github.com/dabom/dpcs/policy"
)

// GrantOp is one step of a grant's life for one rating group: create (first
// step), update, or release. ID dedupes the step (a retry returns the stored
// result); GrantID names the reservation across steps.
type GrantOp struct {
	ID, GrantID          string
	FamilyID, CustomerID int64
	AppID, Category      string    // what the rating group covers ("" = any traffic)
	Used                 int64     // bytes used since the last step, charged now
	Requested            int64     // bytes asked for next (0 on release)
	Release              bool      // charge Used, return the rest, grant nothing
	At                   time.Time // judged at this time (windows, days, months)
}

// GrantResult is the answer to one GrantOp.
type GrantResult struct {
	Decision         policy.Decision // Allowed, or why nothing (more) is granted
	Rule             string
	Granted          int64     // bytes reserved now for GrantID (0: blocked/released)
	Final            bool      // these are the last units (finalUnitIndication)
	Charged          int64     // bytes of Used charged
	Remaining, Total int64     // the family pool after the step
	ValidUntil       time.Time // next boundary that could change the answer
	Throttle         int64
	Crossed          []int
	Duplicate        bool
}
