package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/golang-jwt/jwt/v5"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/access"
	"github.com/dabom/dpcs/service/api/gateway"
	"github.com/dabom/dpcs/service/store"
)

const tokenIssuer = "dpcs"

// accessClaims are the claims of an access token: sub is the member id, fam
// the family id (0 for ADMIN), role the member's role when it was issued,
// sid the session (the refresh token rotation family) it was issued in.
type accessClaims struct {
	Fam  int64  `json:"fam"`
	Role string `json:"role"`
	Sid  string `json:"sid"`
	jwt.RegisteredClaims
}

// Principal is the authenticated caller of a request.
type Principal struct {
	ID       int64
	FamilyID int64 // 0 for ADMIN and AGENT
	Role     policy.Role
	// write: the request may change something (not GET or HEAD); an AGENT
	// is refused those.
	write bool
	// session and expires are those of the access token: a stream opened
	// with it ends when either ends.
	session string
	expires time.Time
}

func (p Principal) actor() store.Actor { return store.Actor{ID: p.ID, Role: p.Role} }

type principalKey struct{}

func principalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// admin authorizes a back-office request: ADMIN, or AGENT for reading.
func (a *Server) admin(ctx context.Context) (Principal, error) {
	p, ok := principalFrom(ctx)
	if !ok {
		return p, huma.Error401Unauthorized("not authenticated")
	}
	switch {
	case p.Role == policy.RoleAgent && p.write:
		return p, errAgentReadOnly
	case !p.Role.BackOffice():
		return p, huma.Error403Forbidden("back-office route: ADMIN or AGENT only")
	}
	return p, nil
}

// errAgentReadOnly answers a care agent's change.
var errAgentReadOnly = huma.Error403Forbidden("care agents (AGENT) read and change nothing: ask an ADMIN")

// Tokens is a login's answer: an access JWT and a refresh token.
type Tokens struct {
	AccessToken      string      `json:"accessToken"`
	TokenType        string      `json:"tokenType" example:"Bearer"`
	ExpiresIn        int64       `json:"expiresIn" doc:"Access token lifetime in seconds"`
	RefreshToken     string      `json:"refreshToken,omitempty" doc:"Single use: exchange it at /auth/refresh; presenting it twice revokes the session. Absent for browser sessions (X-DPCS-Session: cookie), whose refresh token is in the dpcs_refresh cookie"`
	RefreshExpiresAt time.Time   `json:"refreshExpiresAt"`
	MemberID         int64       `json:"memberId"`
	FamilyID         int64       `json:"familyId" doc:"0 for the back office (ADMIN, AGENT)"`
	Role             policy.Role `json:"role" enum:"MEMBER,OWNER,ADMIN,AGENT"`
	// PasswordWeak is set on a login whose password the password rules
	// would refuse now (set before them, or since found on the list).
	PasswordWeak bool `json:"passwordWeak,omitempty" doc:"The password used does not meet the password rules (doc/security.md): ask the member to change it with POST /me/password"`
}

// IssueTokens starts a session for member (or admin) memberID without a
// password: the all-in-one uses it to print a demo owner's token.
func (a *Server) IssueTokens(ctx context.Context, memberID int64) (Tokens, error) {
	m, err := a.cfg.Store.MemberByID(ctx, memberID)
	if err != nil {
		return Tokens{}, err
	}
	if m.DeletedAt != nil {
		return Tokens{}, store.ErrNotFound
	}
	return a.issue(ctx, m, "")
}

// issue starts a new session for m (login, IssueTokens): refresh must be
// empty. A rotation continues its session with issueIn.
func (a *Server) issue(ctx context.Context, m store.Member, refresh string) (Tokens, error) {
	if refresh != "" {
		return Tokens{}, errors.New("api: issue starts sessions; a rotated token's goes through issueIn")
	}
	return a.issueIn(ctx, m, "", store.RefreshToken{})
}

// issueIn mints an access token for m and, when refresh is empty, a new
// refresh rotation family (a session); otherwise refresh is the
// already-rotated token rt. The access token carries the session as sid.
func (a *Server) issueIn(ctx context.Context, m store.Member, refresh string, rt store.RefreshToken) (Tokens, error) {
	if refresh == "" {
		tok, issued, err := a.cfg.Store.IssueRefreshToken(ctx, m.ID, a.cfg.RefreshTTL)
		if err != nil {
			return Tokens{}, err
		}
		refresh, rt = tok, issued
	}
	access, err := a.signAccess(m, rt.RotationID)
	if err != nil {
		return Tokens{}, err
	}
	return Tokens{AccessToken: access, TokenType: "Bearer", ExpiresIn: int64(a.cfg.AccessTTL / time.Second),
		RefreshToken: refresh, RefreshExpiresAt: rt.ExpiresAt, MemberID: m.ID, FamilyID: m.FamilyID, Role: m.Role}, nil
}

func (a *Server) signAccess(m store.Member, session string) (string, error) {
	now := a.now()
	c := accessClaims{Fam: m.FamilyID, Role: string(m.Role), Sid: session, RegisteredClaims: jwt.RegisteredClaims{
		Issuer:    tokenIssuer,
		Subject:   strconv.FormatInt(m.ID, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(a.cfg.AccessTTL)),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(a.cfg.Secret)
}

// verify checks an access token: HS256 only, issuer, expiry by the API's
// clock, a session. It returns the member id and the token's claims.
func (a *Server) verify(token string) (int64, accessClaims, error) {
	var c accessClaims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return a.cfg.Secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithIssuer(tokenIssuer),
		jwt.WithExpirationRequired(), jwt.WithTimeFunc(a.now))
	if err != nil {
		return 0, accessClaims{}, err
	}
	id, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil || id <= 0 {
		return 0, accessClaims{}, errors.New("bad subject")
	}
	if c.Sid == "" {
		return 0, accessClaims{}, errors.New("no session")
	}
	return id, c, nil
}

// authenticate is the huma middleware checking the bearer token of every
// operation that declares the bearer scheme. The caller's family and role are
// read from the store with its session (one query), so a removed member or an
// ended session (logout, refresh-token reuse) is refused at once and a role
// change takes effect without waiting for the token to expire.
func (a *Server) authenticate(ctx huma.Context, next func(huma.Context)) {
	if len(ctx.Operation().Security) == 0 {
		next(ctx)
		return
	}
	if _, gw := ctx.Operation().Security[0][gateway.Scheme]; gw {
		a.gateway.Authenticate(ctx, next)
		return
	}
	fail := func(msg string) {
		ctx.SetHeader("WWW-Authenticate", `Bearer realm="dpcs", error="invalid_token"`)
		huma.WriteErr(a.api, ctx, http.StatusUnauthorized, msg)
	}
	h := ctx.Header("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		fail("missing bearer token")
		return
	}
	id, claims, err := a.verify(strings.TrimSpace(tok))
	if err != nil {
		fail("invalid or expired access token")
		return
	}
	m, live, err := a.cfg.Store.MemberSession(ctx.Context(), id, claims.Sid)
	if err != nil || m.DeletedAt != nil {
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			a.log.ErrorContext(ctx.Context(), "api: authenticate", "err", err)
			huma.WriteErr(a.api, ctx, http.StatusServiceUnavailable, "cannot check the token now")
			return
		}
		fail("the token's member no longer exists")
		return
	}
	if !live {
		fail("the token's session has ended")
		return
	}
	p := Principal{ID: m.ID, FamilyID: m.FamilyID, Role: m.Role, session: claims.Sid, expires: claims.ExpiresAt.Time,
		write: ctx.Method() != http.MethodGet && ctx.Method() != http.MethodHead}
	if ctx.Operation().OperationID == streamOperation {
		a.gateStream(ctx, p, next)
		return
	}
	next(huma.WithValue(ctx, principalKey{}, p))
}

// Credentials is the body of a login.
type Credentials struct {
	Login    string `json:"login" minLength:"1" maxLength:"64" doc:"A member id (digits, no leading 0) or a phone number (starting with 0 or +)" example:"1000001"`
	Password string `json:"password" minLength:"1" maxLength:"128"`
}

type loginInput struct {
	Body    Credentials
	browser browser
}

// Resolve reads what a cookie session needs of the request (huma.Resolver).
func (in *loginInput) Resolve(ctx huma.Context) []error { return in.browser.resolve(ctx) }

// RefreshGrant is the body of a refresh or a logout: a refresh token.
type RefreshGrant struct {
	RefreshToken string `json:"refreshToken" minLength:"1" maxLength:"256"`
}

type refreshInput struct {
	Body    *RefreshGrant
	browser browser
}

// Resolve reads what a cookie session needs of the request (huma.Resolver).
func (in *refreshInput) Resolve(ctx huma.Context) []error { return in.browser.resolve(ctx) }

// token is the refresh token a refresh or a logout presents: the body's,
// else the cookie's (then cookie is set). A request with neither is
// answered 422 (JSON clients) or 401 (browsers); a cookie without the
// session header, or from another site, 403.
func (in *refreshInput) token() (token string, cookie bool, err error) {
	switch {
	case in.Body != nil:
		return in.Body.RefreshToken, false, nil
	case in.browser.cookie == "" && !in.browser.session:
		return "", false, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.refreshToken",
			Message: "required: the refresh token (or, in a browser, the " + RefreshCookie + " cookie with " + SessionHeader + ": " + cookieSession + ")"})
	}
	if err := in.browser.cookieAllowed(); err != nil {
		return "", false, err
	}
	if in.browser.cookie == "" {
		return "", true, huma.Error401Unauthorized("no refresh cookie: log in again")
	}
	return in.browser.cookie, true, nil
}

type tokensOutput struct {
	CacheControl string `header:"Cache-Control"`
	SetCookie    string `header:"Set-Cookie" doc:"Browser sessions only: the dpcs_refresh cookie"`
	Body         Tokens
}

// tokens is the answer of a login or a refresh: the refresh token in the
// body, or in the cookie for a browser session.
func (a *Server) tokens(t Tokens, cookie bool, b browser) *tokensOutput {
	out := &tokensOutput{CacheControl: "no-store", Body: t}
	if cookie {
		out.SetCookie = a.refreshCookie(t.RefreshToken, t.RefreshExpiresAt, b.secure)
		out.Body.RefreshToken = ""
	}
	return out
}

type logoutOutput struct {
	SetCookie string `header:"Set-Cookie" doc:"Browser sessions only: the dpcs_refresh cookie, cleared"`
}

func (a *Server) registerAuth() {
	tags := []string{authTag}
	huma.Register(a.api, huma.Operation{OperationID: "login", Method: http.MethodPost, Path: "/auth/token", Tags: tags, Security: public(),
		Summary: "Log in",
		Description: "Exchanges a member id or phone and password for an access token (30 min) and a refresh token (7 days). " +
			"Attempts are limited per client address and per login, and a login is locked for a while after repeated " +
			"failures (whether or not it names a member): such attempts are answered 429 with Retry-After in seconds. " +
			"A failure (401) says in attemptsLeft how many more the login is allowed before it is locked; the one that " +
			"locks it says 0, with Retry-After. Browsers send X-DPCS-Session: cookie and get the refresh token in an " +
			"HttpOnly cookie instead of the body (doc/security.md, \"The refresh cookie\").",
		Responses: map[string]*huma.Response{"401": a.loginProblemResponse()},
		Errors:    []int{http.StatusTooManyRequests}},
		func(ctx context.Context, in *loginInput) (*tokensOutput, error) {
			key := a.loginKey(ctx, in.Body.Login)
			if err := a.admitLogin(ctx, key); err != nil {
				return nil, err
			}
			m, err := a.cfg.Store.Authenticate(ctx, in.Body.Login, in.Body.Password)
			if errors.Is(err, store.ErrBadCredentials) {
				return nil, a.badCredentials(a.loginFailed(ctx, key, in.Body.Login))
			}
			if err != nil {
				return nil, a.problem(ctx, err, "body")
			}
			a.loginSucceeded(ctx, key)
			t, err := a.issue(ctx, m, "")
			if err != nil {
				return nil, a.problem(ctx, err, "body")
			}
			t.PasswordWeak = store.CheckPassword(in.Body.Password, strconv.FormatInt(m.ID, 10), m.Phone, m.Name) != nil
			return a.tokens(t, in.browser.session, in.browser), nil
		})
	huma.Register(a.api, huma.Operation{OperationID: "refresh", Method: http.MethodPost, Path: "/auth/refresh", Tags: tags, Security: public(),
		Summary: "Rotate a refresh token",
		Description: "Exchanges a refresh token for a new pair. Each refresh token works once: presenting a rotated " +
			"token again is taken as theft and revokes the whole session (401). Refreshes are limited per client " +
			"address (429 with Retry-After in seconds). A browser session (X-DPCS-Session: cookie) sends no body: the " +
			"token is its dpcs_refresh cookie, and the new one comes back in the cookie only (403 without the header or " +
			"from another site; a refused cookie is cleared). A refused token of a session that ended says why in ended " +
			"(EXPIRED, PASSWORD, REMOVED, REVOKED), for the words a front-end shows.",
		Errors:    []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests},
		Responses: map[string]*huma.Response{"401": a.sessionProblemResponse()}},
		func(ctx context.Context, in *refreshInput) (*tokensOutput, error) {
			presented, cookie, err := in.token()
			if err != nil {
				return nil, err
			}
			// A browser whose cookie is refused should not present it again.
			refused := func(err error) error {
				if cookie && statusOf(err) == http.StatusUnauthorized {
					return a.clearingCookie(err, in.browser.secure)
				}
				return err
			}
			tok, rt, err := a.rotate(ctx, presented)
			if errors.Is(err, store.ErrNotFound) {
				return nil, refused(huma.Error401Unauthorized("unknown refresh token"))
			}
			if errors.Is(err, store.ErrTokenExpired) || errors.Is(err, store.ErrTokenReused) {
				return nil, refused(a.sessionEnded(ctx, err))
			}
			if err != nil {
				return nil, refused(a.problem(ctx, err, "body.refreshToken"))
			}
			m, err := a.cfg.Store.MemberByID(ctx, rt.CustomerID)
			if err != nil || m.DeletedAt != nil {
				return nil, refused(&SessionProblem{ErrorModel: huma.ErrorModel{Status: http.StatusUnauthorized,
					Title: http.StatusText(http.StatusUnauthorized), Detail: "the member was removed"}, Ended: EndedRemoved})
			}
			t, err := a.issueIn(ctx, m, tok, rt)
			if err != nil {
				return nil, a.problem(ctx, err, "body")
			}
			t.RefreshExpiresAt = rt.ExpiresAt
			return a.tokens(t, cookie, in.browser), nil
		})
	huma.Register(a.api, huma.Operation{OperationID: "logout", Method: http.MethodPost, Path: "/auth/logout", Tags: tags, Security: public(),
		Summary: "Log out", Description: "Revokes the refresh token's session: its access tokens are refused and its " +
			"notification streams end, on every API instance. An unknown or already revoked token is answered 204 too. " +
			"A browser session (X-DPCS-Session: cookie, no body) presents its dpcs_refresh cookie, which the answer clears.",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusForbidden, http.StatusUnprocessableEntity}},
		func(ctx context.Context, in *refreshInput) (*logoutOutput, error) {
			presented, cookie, err := in.token()
			out := &logoutOutput{}
			if cookie {
				out.SetCookie = a.refreshCookie("", time.Time{}, in.browser.secure)
			}
			if statusOf(err) == http.StatusUnauthorized {
				return out, nil // a browser with no cookie left: logged out already
			}
			if err != nil {
				return nil, err
			}
			rt, err := a.cfg.Store.RevokeRefreshToken(ctx, presented)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return nil, a.problem(ctx, err, "body.refreshToken")
			}
			if err == nil {
				a.accessChanged(ctx, access.Event{Member: rt.CustomerID, Session: rt.RotationID})
			}
			return out, nil
		})
}

// rotate is Store.RotateRefreshToken; a reuse, which revokes the session,
// also ends that session's streams on every instance.
func (a *Server) rotate(ctx context.Context, token string) (string, store.RefreshToken, error) {
	tok, rt, err := a.cfg.Store.RotateRefreshToken(ctx, token, a.cfg.RefreshTTL)
	if reused, ok := errors.AsType[*store.TokenReusedError](err); ok {
		a.accessChanged(ctx, access.Event{Member: reused.CustomerID, Session: reused.RotationID})
	}
	return tok, rt, err
}

// accessChanged publishes e once the store committed the change: this
// instance's streams are told at once, the other instances' through
// access.Events (when that fails, their periodic re-check ends the streams).
// It runs to the end even if the client has gone.
func (a *Server) accessChanged(ctx context.Context, e access.Event) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), accessPublishTimeout)
	defer cancel()
	if err := a.cfg.AccessEvents.Publish(ctx, e); err != nil {
		a.log.WarnContext(ctx, "api: access event not published; other instances' streams end at their next re-check",
			"member", e.Member, "err", err)
	}
}

// accessPublishTimeout bounds publishing one access.Event.
const accessPublishTimeout = 2 * time.Second
