package api

import (
	"context"
	"errors"
	"net/http"
	"reflect"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/service/store"
)

// Why a session ended, as a refused refresh says (SessionProblem.Ended):
// the front-ends say it in words instead of dropping to a blank login
// (doc/frontends.md, "Sessions and passwords").
const (
	EndedExpired  = "EXPIRED"  // the refresh token's 7 days passed
	EndedPassword = "PASSWORD" // the member's password was changed or reset since
	EndedRemoved  = "REMOVED"  // the member was removed from its family
	EndedRevoked  = "REVOKED"  // logged out elsewhere, or a rotated token presented again
)

// SessionProblem is the problem (RFC 9457) of a refused refresh whose
// session ended: the common members and why.
type SessionProblem struct {
	huma.ErrorModel
	Ended string `json:"ended" enum:"EXPIRED,PASSWORD,REMOVED,REVOKED" doc:"Why the session ended: EXPIRED (its 7 days passed), PASSWORD (the password was changed or reset since), REMOVED (the member left the family), REVOKED (logged out elsewhere, or a used token presented again)"`
}

// sessionEnded is the 401 of a refresh refused as expired or reused
// (err), saying why its session ended: a password set after the token was
// issued, the member's removal, or else a revocation.
func (a *Server) sessionEnded(ctx context.Context, err error) error {
	p := &SessionProblem{ErrorModel: huma.ErrorModel{Status: http.StatusUnauthorized, Title: http.StatusText(http.StatusUnauthorized)}}
	reused, ok := errors.AsType[*store.TokenReusedError](err)
	switch {
	case errors.Is(err, store.ErrTokenExpired):
		p.Detail, p.Ended = "refresh token expired", EndedExpired
	case !ok:
		p.Detail, p.Ended = "the session ended", EndedRevoked
	default:
		p.Detail, p.Ended = "refresh token reused: the session is revoked", EndedRevoked
		m, merr := a.cfg.Store.MemberByID(ctx, reused.CustomerID)
		switch {
		case merr != nil:
		case m.DeletedAt != nil:
			p.Detail, p.Ended = "the member was removed", EndedRemoved
		default:
			if set, serr := a.cfg.Store.PasswordSetSince(ctx, m.FamilyID, m.ID, reused.IssuedAt); serr == nil && set {
				p.Detail, p.Ended = "the password was changed", EndedPassword
			}
		}
	}
	return p
}

// sessionProblemResponse documents the 401 of POST /auth/refresh.
func (a *Server) sessionProblemResponse() *huma.Response {
	schema := a.api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[SessionProblem](), true, "SessionProblem")
	return &huma.Response{Description: "The refresh token is not accepted; for a session that ended, why",
		Content: map[string]*huma.MediaType{"application/problem+json": {Schema: schema}}}
}
