package quota

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dabom/dpcs/policy"
)

// A dedupe record holds an event's result in one of two forms (see
// doc/redis-keys.md, "Stored results"):
//
//   - long, every engine's: "decision|remaining|total|daily|monthly|throttle|crossed|rule",
//     e.g. "BLOCKED_LIMIT_MONTHLY|0|1073741824|0|1073741824|0||LIMIT:DATA:MONTHLY";
//   - short, this release's default: a lower-case letter for the decision
//     (shortCode) followed by "remaining|total|daily|monthly|throttle|crossed"
//     and "|rule" only when the rule is not the one the decision implies,
//     e.g. "o0|1073741824|0|1073741824|0|".
//
// A long record starts with an upper-case decision (or grantPrefix), a short
// one with a lower-case letter, so every engine of this release reads both.
// The short form keeps the records of a family's last day under Redis's
// hash-max-listpack-value (64 bytes), so its dedupe bucket stays a listpack
// (about half the memory of a hashtable). An engine before this release
// reads only the long form: it fails a replay of a short record with
// "malformed stored result" (never a decision made up from it), so upgrade
// every engine before the short form is written (WithLongResults).

// shortCode is a decision's letter in a short stored result and the rule its
// blocks report when the record names none ("" for decisions whose rule
// names an app, a category or a window, which the record always carries).
// ok is false for a decision with no letter, which is stored long.
func shortCode(d policy.Decision) (code byte, rule string, ok bool) {
	switch d {
	case policy.Allowed:
		return 'a', "", true
	case policy.BlockedNotMember:
		return 'm', policy.RuleMembership, true
	case policy.BlockedAccess:
		return 'x', policy.KeyBlockAccess, true
	case policy.BlockedApp:
		return 'p', "", true
	case policy.BlockedTime:
		return 't', "", true
	case policy.BlockedLimitDaily:
		return 'd', policy.KeyLimitDaily, true
	case policy.BlockedLimitMonthly:
		return 'o', policy.KeyLimitMonthly, true
	case policy.BlockedFamilyQuota:
		return 'q', policy.RulePool, true
	case policy.BlockedAppLimit:
		return 'b', "", true
	}
	return 0, "", false
}

// decisionOf is shortCode's inverse.
func decisionOf(code byte) (d policy.Decision, rule string, ok bool) {
	for _, d := range policy.Decisions() {
		if c, rule, ok := shortCode(d); ok && c == code {
			return d, rule, true
		}
	}
	return "", "", false
}

// encodeResult is the stored form of a result, as apply.lua writes it:
// short unless long is set (WithLongResults) or the decision has no letter.
func encodeResult(r Result, long bool) string {
	nums := strconv.FormatInt(r.Remaining, 10) + "|" + strconv.FormatInt(r.Total, 10) + "|" +
		strconv.FormatInt(r.DailyUsed, 10) + "|" + strconv.FormatInt(r.MonthlyUsed, 10) + "|" +
		strconv.FormatInt(r.ThrottleKbps, 10) + "|" + encodeCrossed(r.Crossed, r.Arms)
	code, implied, ok := shortCode(r.Decision)
	if long || !ok {
		return string(r.Decision) + "|" + nums + "|" + r.Rule
	}
	if r.Rule == implied {
		return string(code) + nums
	}
	return string(code) + nums + "|" + r.Rule
}

// decodeResult parses a stored result of either form.
func decodeResult(s string) (Result, error) {
	var (
		r   Result
		f   []string
		err error
	)
	if s != "" && s[0] >= 'a' && s[0] <= 'z' {
		d, implied, ok := decisionOf(s[0])
		if !ok {
			return Result{}, fmt.Errorf("malformed stored result %q: unknown decision", s)
		}
		f = strings.SplitN(s[1:], "|", 7)
		if len(f) < 6 {
			return Result{}, fmt.Errorf("malformed stored result %q", s)
		}
		r.Decision, r.Rule = d, implied
		if len(f) == 7 {
			r.Rule = f[6]
		}
	} else {
		f = strings.SplitN(s, "|", 8)
		if len(f) != 8 {
			return Result{}, fmt.Errorf("malformed stored result %q", s)
		}
		r.Decision, r.Rule = policy.Decision(f[0]), f[7]
		if !r.Decision.Valid() {
			return Result{}, fmt.Errorf("malformed stored result %q: unknown decision", s)
		}
		f = f[1:]
	}
	nums := []*int64{&r.Remaining, &r.Total, &r.DailyUsed, &r.MonthlyUsed, &r.ThrottleKbps}
	for i, p := range nums {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return Result{}, fmt.Errorf("malformed stored result %q: %w", s, err)
		}
		*p = n
	}
	if r.Crossed, r.Arms, err = decodeCrossed(f[5]); err != nil {
		return Result{}, fmt.Errorf("malformed stored result %q: %w", s, err)
	}
	return r, nil
}
