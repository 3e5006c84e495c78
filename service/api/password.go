package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/service/access"
	"github.com/dabom/dpcs/service/family"
	"github.com/dabom/dpcs/service/store"
)

// Passwords (doc/security.md, "Passwords"): a member changes its own with
// the current one, an owner resets a member's, an admin anyone's; the
// rules are store.CheckPassword's. A change ends the member's other
// sessions, a reset every session: their access tokens are refused at once
// and their streams end on every instance (access.Events).

// LoginProblem is the problem (RFC 9457) of a failed login: the common
// members and attemptsLeft.
type LoginProblem struct {
	huma.ErrorModel
	AttemptsLeft int `json:"attemptsLeft" doc:"How many more failed attempts the login is allowed before it is locked (then 429 with Retry-After); 0: this one locked it. The same whether or not the login names a member"`
}

// badCredentials is the answer to a wrong login or password: a
// LoginProblem with the attempts left (loginFailed's), with Retry-After
// when this failure locked the login; a plain 401 when the count is
// unknown (-1).
func (a *Server) badCredentials(left int) error {
	if left < 0 {
		return huma.Error401Unauthorized("bad credentials")
	}
	p := &LoginProblem{ErrorModel: huma.ErrorModel{Status: http.StatusUnauthorized, Title: http.StatusText(http.StatusUnauthorized),
		Detail: "bad credentials"}, AttemptsLeft: left}
	if left == 0 {
		return huma.ErrorWithHeaders(p, http.Header{"Retry-After": {retryAfter(a.guard.limits.LockoutFor)}})
	}
	return p
}

// loginProblemResponse documents the 401 of POST /auth/token.
func (a *Server) loginProblemResponse() *huma.Response {
	schema := a.api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[LoginProblem](), true, "LoginProblem")
	return &huma.Response{Description: "Wrong login or password, with the attempts left before the login is locked",
		Content: map[string]*huma.MediaType{"application/problem+json": {Schema: schema}}}
}

// PasswordChange is the body of POST /me/password.
type PasswordChange struct {
	CurrentPassword string `json:"currentPassword" minLength:"1" maxLength:"128" doc:"The caller's password now. A wrong one counts toward the lockout of the caller's login, as a failed login does"`
	NewPassword     string `json:"newPassword" minLength:"1" maxLength:"128" doc:"At least 8 characters and at most 72 bytes, not a common or breached password, not the caller's id, phone or name"`
}

type passwordChangeInput struct {
	Body PasswordChange
}

// PasswordReset is the body of a password reset.
type PasswordReset struct {
	Password string `json:"password" minLength:"1" maxLength:"128" doc:"The member's new password: at least 8 characters and at most 72 bytes, not a common or breached password, not the member's id, phone or name"`
}

type passwordResetInput struct {
	MemberPath
	Body PasswordReset
}

func (a *Server) registerPasswords() {
	huma.Register(a.api, huma.Operation{OperationID: "change-password", Method: http.MethodPost, Path: "/me/password",
		Tags: []string{authTag}, Security: secured(), DefaultStatus: http.StatusNoContent, Summary: "Change my password",
		Description: "Sets the caller's password, given the current one. The session of the access token used goes on; " +
			"every other session of the caller ends at once (its tokens are refused, its notification streams close). " +
			"A wrong current password (422 at body.currentPassword, saying the attempts left) counts toward the lockout " +
			"of the caller's login by member id, as a failed login does; while it is locked the answer is 429 with " +
			"Retry-After. A new password the rules refuse is 422 at body.newPassword. Audited.",
		Errors: []int{http.StatusUnauthorized, http.StatusUnprocessableEntity, http.StatusTooManyRequests}},
		a.changePassword)

	huma.Register(a.api, huma.Operation{OperationID: "reset-member-password", Method: http.MethodPost,
		Path: "/families/{familyId}/members/{customerId}/password", Tags: []string{familiesTag}, Security: secured(),
		DefaultStatus: http.StatusNoContent, Summary: "Reset a member's password",
		Description: "Sets a member's password without the current one: an owner resets the password of a MEMBER of " +
			"the family who was never an owner (not another owner's, not a demoted owner's — demoting a co-owner, " +
			"resetting its password and promoting it back would take over its login —, nor its own: that is POST " +
			"/me/password), an admin anyone's; a refusal is 403 and audited (member.password.refused). Every session of the " +
			"member ends at once: its tokens are refused and its notification streams close on every instance. " +
			"A password the rules refuse is 422 at body.password. Audited.",
		Errors: []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusUnprocessableEntity}},
		a.resetPassword)
}

func (a *Server) changePassword(ctx context.Context, in *passwordChangeInput) (*struct{}, error) {
	p, ok := principalFrom(ctx)
	if !ok {
		return nil, huma.Error401Unauthorized("not authenticated")
	}
	id := strconv.FormatInt(p.ID, 10)
	key := a.guard.key("login", memberLogin(p.ID))
	if err := a.admitLogin(ctx, key); err != nil {
		return nil, err
	}
	ended, err := a.cfg.Store.ChangePassword(ctx, p.ID, in.Body.CurrentPassword, in.Body.NewPassword, p.session)
	switch {
	case errors.Is(err, store.ErrBadCredentials):
		return nil, wrongCurrentPassword(a.loginFailed(ctx, key, id))
	case err != nil:
		return nil, a.passwordProblem(ctx, err, "body.newPassword")
	}
	a.loginSucceeded(ctx, key)
	if ended > 0 {
		a.accessChanged(ctx, access.Event{Member: p.ID}) // the other sessions' streams end
	}
	return nil, nil
}

// wrongCurrentPassword is the 422 of a wrong current password, saying the
// attempts left (loginFailed's).
func wrongCurrentPassword(left int) error {
	msg := "is not your current password"
	switch {
	case left == 0:
		msg += ": your login is now locked for a while"
	case left == 1:
		msg += " (1 attempt left before your login is locked)"
	case left > 1:
		msg += fmt.Sprintf(" (%d attempts left before your login is locked)", left)
	}
	return huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.currentPassword", Message: msg})
}

func (a *Server) resetPassword(ctx context.Context, in *passwordResetInput) (*struct{}, error) {
	p, err := a.family(ctx, in.FamilyID, ownerOnly)
	if err != nil {
		return nil, err
	}
	switch err := a.cfg.Family.ResetPassword(ctx, in.FamilyID, in.CustomerID, in.Body.Password, p.actor()); {
	case errors.Is(err, family.ErrOwnPassword):
		return nil, huma.Error403Forbidden("change your own password with POST /me/password: it asks for the current one")
	case errors.Is(err, family.ErrOwnerPassword):
		return nil, huma.Error403Forbidden("the password of a member who is or was an owner is reset by the back office")
	case errors.Is(err, family.ErrNotYours):
		return nil, huma.Error403Forbidden("only an owner of the family or the back office resets passwords")
	case err != nil:
		return nil, a.passwordProblem(ctx, err, "body.password")
	}
	a.accessChanged(ctx, access.Event{Member: in.CustomerID}) // its streams end
	return nil, nil
}

// passwordProblem is problem, with the store's refusal of a password (a
// FieldError at "password") answered at loc.
func (a *Server) passwordProblem(ctx context.Context, err error, loc string) error {
	if fe, ok := errors.AsType[*store.FieldError](err); ok && fe.Field == "password" && errors.Is(err, store.ErrInvalid) {
		return huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: loc, Message: fe.Msg})
	}
	return a.problem(ctx, err, "path.customerId")
}
