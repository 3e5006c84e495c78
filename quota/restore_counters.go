package quota

import (
	"time"

	"github.com/dabom/dpcs/policy"
)

// What a restore computes from the source of truth beside the writes
// (restore.go): the days whose budget counters may live, the budgets a
// usage counts for, the thresholds marked fired and the re-arms.

// budgetDay is a day whose budget hash may live (budgetDays): its
// YYYYMMDD and how long from now its hash lives.
type budgetDay struct {
	day string
	ttl time.Duration
}

// budgetDays are the days whose budget hash may live now: an event judged
// now may be of any day the dedupe window reaches, and a day's hash lives
// to its end and a dedupe bucket's life after (lua/apply.lua).
func (e *Engine) budgetDays() []budgetDay {
	now := e.now()
	slack := e.bucketTTL()
	lt := now.Add(-slack).In(e.loc)
	var out []budgetDay
	for d := time.Date(lt.Year(), lt.Month(), lt.Day(), 12, 0, 0, 0, e.loc); ; d = d.AddDate(0, 0, 1) {
		start := time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, e.loc)
		if start.After(now.Add(e.dedupeTTL)) {
			return out
		}
		end := time.Date(d.Year(), d.Month(), d.Day()+1, 0, 0, 0, 0, e.loc)
		if end.Add(slack).After(now) {
			out = append(out, budgetDay{policy.MomentOf(d, e.loc).Day, end.Add(slack).Sub(now)})
		}
	}
}

// countBudget adds u's bytes on day to spent for the budgets of c that
// count it: its app's and its category's (u.Category, else the catalog's).
func (e *Engine) countBudget(spent map[int64]map[string]map[string]int64, c policy.Constraints, u Usage, day string) {
	cat := u.Category
	if cat == "" && e.catalog != nil {
		cat = e.catalog.Category(u.AppID)
	}
	byApp, byCat := c.Budgeted(u.AppID, cat)
	if !byApp && !byCat {
		return
	}
	if spent[u.CustomerID] == nil {
		spent[u.CustomerID] = map[string]map[string]int64{}
	}
	f := spent[u.CustomerID][day]
	if f == nil {
		f = map[string]int64{}
		spent[u.CustomerID][day] = f
	}
	if byApp {
		f["a:"+u.AppID] += u.Bytes
	}
	if byCat {
		f["c:"+string(cat)] += u.Bytes
	}
}

// restoredFired says whether Restore marks a threshold fired: it fired
// arms times this month, the pool (total, remaining) has reached it, and no
// recorded pool change re-armed it after its last arm (rearmed, the arm it
// was re-armed after).
func restoredFired(pct, arms int, total, remaining int64, rearmed int) bool {
	return arms > 0 && total > 0 && remaining*100 <= int64(pct)*total && rearmed < arms
}

// RestoredRearms returns, per month and threshold, the re-arms Restore(st)
// makes: the thresholds that fired in an accepted month (FamilyState.Arms)
// that Restore leaves armed because the pool is above them, with no
// recorded re-arm after their last arm — as a pool change would have
// re-armed them. The caller that records pool changes' re-arms
// (judge.WithRearmStore) records these too: a later rebuild, after the
// pool reached such a threshold again with no event, would restore it fired
// otherwise and its next alert would be lost.
func (e *Engine) RestoredRearms(st FamilyState) map[string]map[int]int {
	months, from, to := e.AcceptedMonths()
	used := map[string]int64{}
	for _, u := range st.Usage {
		if u.At.Before(from) || !u.At.Before(to) {
			continue
		}
		used[policy.MomentOf(u.At, e.loc).Month] += u.Bytes
	}
	var out map[string]map[int]int
	for _, month := range months {
		total := st.Plan + st.TopUps[month]
		if !st.Provisioned {
			total = st.TopUps[month]
		}
		remaining := policy.Pool{Total: total, Used: used[month]}.Remaining()
		for pct, arms := range st.Arms[month] {
			if arms > 0 && st.Rearmed[month][pct] < arms && !restoredFired(pct, arms, total, remaining, st.Rearmed[month][pct]) {
				if out == nil {
					out = map[string]map[int]int{}
				}
				if out[month] == nil {
					out[month] = map[int]int{}
				}
				out[month][pct] = arms
			}
		}
	}
	return out
}
