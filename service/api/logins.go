package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/dabom/dpcs/service/limit"
	"github.com/danielgtaylor/huma/v2"
)

// The back office's view of a family's logins (#38: a care agent on the
// phone with a family could not see that a child's login was locked, nor
// how many tries it had left).

// FailureCounter is a limit.Limiter that also says how many consecutive
// failures a key has now (MemoryLimiter, RedisLimiter): what the attempts
// left are counted from.
type FailureCounter interface {
	Failures(ctx context.Context, key string) (int, error)
}

var (
	_ FailureCounter = (*limit.MemoryLimiter)(nil)
	_ FailureCounter = (*limit.RedisLimiter)(nil)
)

// MemberLogin is one member's login as the back office sees it: whether it
// is locked and for how long, and how many failed attempts it may still
// make, by member number and by phone.
type MemberLogin struct {
	CustomerID int64  `json:"customerId"`
	Name       string `json:"name"`
	Role       string `json:"role"`
	// ByID and ByPhone are the member's two logins (ByPhone absent without
	// a phone).
	ByID    LoginState  `json:"byId"`
	ByPhone *LoginState `json:"byPhone,omitempty"`
}

// LoginState is one login's lockout state.
type LoginState struct {
	// LockedSeconds is how long the login stays locked (0: it is not).
	LockedSeconds int64 `json:"lockedSeconds" doc:"How long the login stays locked; 0: not locked"`
	// AttemptsLeft is how many more failed attempts lock it.
	AttemptsLeft int `json:"attemptsLeft" doc:"How many more failed attempts lock the login (after DPCS_AUTH_LOCKOUT_AFTER in a row)"`
}

// FamilyLogins is every current member's login state.
type FamilyLogins struct {
	LockoutAfter int           `json:"lockoutAfter" doc:"Failed attempts in a row that lock a login"`
	Members      []MemberLogin `json:"members"`
}

func (a *Server) registerLogins() {
	huma.Register(a.api, huma.Operation{OperationID: "family-logins", Method: http.MethodGet,
		Path: "/admin/families/{familyId}/logins", Summary: "The family's logins: locked, attempts left", Tags: []string{adminTag},
		Description: "For each current member, by member number and by phone: how long its login stays locked and how many " +
			"failed attempts it may still make (DPCS_AUTH_LOCKOUT_AFTER, DPCS_AUTH_LOCKOUT_FOR). A parent resets a child's " +
			"password in the family app; the back office resets anyone's. ADMIN or AGENT.",
		Security: secured(), Errors: []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound}},
		func(ctx context.Context, in *FamilyPath) (*struct{ Body FamilyLogins }, error) {
			if _, err := a.admin(ctx); err != nil {
				return nil, err
			}
			if _, err := a.cfg.Store.GetFamily(ctx, in.FamilyID); err != nil {
				return nil, a.problem(ctx, err, "path.familyId")
			}
			ms, err := a.cfg.Store.ListMembers(ctx, in.FamilyID, false)
			if err != nil {
				return nil, a.problem(ctx, err, "path.familyId")
			}
			out := FamilyLogins{LockoutAfter: a.guard.limits.LockoutAfter, Members: make([]MemberLogin, 0, len(ms))}
			for _, m := range ms {
				ml := MemberLogin{CustomerID: m.ID, Name: m.Name, Role: string(m.Role)}
				if ml.ByID, err = a.loginState(ctx, strconv.FormatInt(m.ID, 10)); err != nil {
					return nil, a.problem(ctx, err, "")
				}
				if m.Phone != "" {
					st, err := a.loginState(ctx, m.Phone)
					if err != nil {
						return nil, a.problem(ctx, err, "")
					}
					ml.ByPhone = &st
				}
				out.Members = append(out.Members, ml)
			}
			return &struct{ Body FamilyLogins }{Body: out}, nil
		})
}

// loginState reads login's lockout from the limiter (the login as the
// member types it: normalLogin's identity).
func (a *Server) loginState(ctx context.Context, login string) (LoginState, error) {
	key := a.guard.key("login", normalLogin(login))
	locked, err := a.guard.limiter.Locked(ctx, key)
	if err != nil {
		return LoginState{}, err
	}
	st := LoginState{LockedSeconds: int64((locked + time.Second - 1) / time.Second), AttemptsLeft: a.guard.limits.LockoutAfter}
	if locked > 0 {
		st.AttemptsLeft = 0
		return st, nil
	}
	if fc, ok := a.guard.limiter.(FailureCounter); ok {
		n, err := fc.Failures(ctx, key)
		if err != nil {
			return LoginState{}, err
		}
		st.AttemptsLeft = max(a.guard.limits.LockoutAfter-n, 0)
	}
	return st, nil
}
