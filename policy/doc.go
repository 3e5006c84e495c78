// Package policy is DPCS's poly-policy model: the constraint keys a family
// owner sets on a member, their validation, policy templates, and a pure-Go
// evaluator with exactly the semantics of the quota package's Lua engine.
//
// # Constraint keys
//
// A member's constraints are a flat map of ACTION:TYPE:TARGET keys to string
// values, the same map the Lua engine reads from the Redis hash
// family:{fid}:customer:{cid}:constraints:
//
//	BLOCK:ACCESS              "1"                  manual block
//	BLOCK:APP:<appId>         "1"                  block one app
//	BLOCK:CATEGORY:<c>        "1"                  block VIDEO, GAME, SOCIAL, MESSAGING, WEB or MUSIC
//	BLOCK:TIME:START / END    "HHMM"               the daily window; START > END wraps midnight, START = END is all day
//	BLOCK:TIME:<name>         "HHMM-HHMM[@DAYS]"   named windows, DAYS like MON-FRI or SAT,SUN
//	LIMIT:DATA:DAILY|MONTHLY  bytes                per-member limit for the period
//	LIMIT:DATA:EXTRA:<period> bytes                extra allowance for a day YYYYMMDD or a month YYYYMM:
//	                                               while current, raises both set limits ("ask for more")
//	LIMIT:DATA:GIFT:<YYYYMM>  ±bytes               data received less data given this month ("데이터 선물하기"):
//	                                               moves the monthly limit only (never below 0)
//	LIMIT:DATA:APP:<appId>    bytes                the app's daily data budget ("유튜브 하루 500 MB")
//	LIMIT:DATA:CATEGORY:<c>   bytes                a category's daily data budget (both: BLOCKED_APP_LIMIT, budget.go)
//	THROTTLE:SPEED            kbps                 returned with ALLOWED
//	ALLOW:APP:<appId>         "1"                  always allowed during downtime (time windows skip it)
//	ALLOW:CATEGORY:<c>        "1"                  a category always allowed during downtime
//	EXCEPT:TIME               YYYYMMDDHHMM         no time window blocks until then (local time): "30분 더"
//	EXCEPT:APP:<appId>        YYYYMMDDHHMM         the app's own and its category's block and budget lifted until then
//
// New policy kinds are new keys, not new code paths. ParseConstraints turns a
// map into the typed Constraints and names every bad key in its error;
// Constraints.Map gives the canonical map back.
//
// # Evaluation
//
// Evaluate judges one request, first match wins: membership → BLOCK:ACCESS →
// app, then category blocks → time windows → the app's, then its category's
// daily budget → DAILY, then MONTHLY limit
// (used + request > limit) → family pool (remaining < request) → ALLOWED. A
// request is never partly granted. Time is judged at the event's own timestamp
// seen in the service zone (MomentOf; default Asia/Seoul); a window that wraps
// midnight belongs to the day it starts on, so "2200-0700@MON-FRI" blocks
// Friday 23:00 and Saturday 03:00 but not Sunday 03:00.
//
//	c, err := policy.ParseConstraints(map[string]string{
//		"BLOCK:TIME:START": "2200", "BLOCK:TIME:END": "0700",
//		"LIMIT:DATA:MONTHLY": "536870912",
//	})
//	res := policy.Evaluate(c, policy.Member{Member: true, MonthlyUsed: used},
//		pool, policy.Request{Bytes: n, AppID: app, At: policy.MomentOf(t, zone)})
//
// Status is the dry run ("is this member blocked now, and why"), and the check
// after a policy change: a member whose usage is at or over a new limit is
// reported blocked at once. Blocked-by-limit is derived from usage and limits and
// never stored, so raising the limit or a new period unblocks by itself.
//
// Reservations: Pool.Reserved and Member.DailyReserved / MonthlyReserved
// are what grants hold; Evaluate fits a request beside them. SizeGrant
// sizes one step of a grant (the request, what the limits and the pool
// leave beside the other reservations, FairShare among the open grants;
// the last units Final below a minimum headroom), and NextChange is the
// first instant its answer could change by time alone (a window, an
// exception's end, the day's end): what a grant's validity ends at.
//
// Thresholds holds a family's alert levels (percent of the pool remaining,
// default 50/30/10); Reached is the exact integer test both engines use.
//
// Templates copy their DefaultRules into an Assignment when applied; editing a
// template later never changes existing assignments.
package policy
