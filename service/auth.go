package service

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
	"github.com/dabom/dpcs/service/store"
)

const tokenIssuer = "dpcs"

// accessClaims are the claims of an access token: sub is the member id, fam
// the family id (0 for ADMIN), role the member's role when it was issued.
type accessClaims struct {
	Fam  int64  `json:"fam"`
	Role string `json:"role"`
	jwt.RegisteredClaims
}

// Principal is the authenticated caller of a request.
type Principal struct {
	ID       int64
	FamilyID int64 // 0 for ADMIN
	Role     policy.Role
}

func (p Principal) actor() store.Actor { return store.Actor{ID: p.ID, Role: p.Role} }

type principalKey struct{}

func principalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// Tokens is a login's answer: an access JWT and a refresh token.
type Tokens struct {
	AccessToken      string      `json:"accessToken"`
	TokenType        string      `json:"tokenType" example:"Bearer"`
	ExpiresIn        int64       `json:"expiresIn" doc:"Access token lifetime in seconds"`
	RefreshToken     string      `json:"refreshToken" doc:"Single use: exchange it at /auth/refresh; presenting it twice revokes the session"`
	RefreshExpiresAt time.Time   `json:"refreshExpiresAt"`
	MemberID         int64       `json:"memberId"`
	FamilyID         int64       `json:"familyId" doc:"0 for back-office admins"`
	Role             policy.Role `json:"role" enum:"MEMBER,OWNER,ADMIN"`
}

// IssueTokens starts a session for member (or admin) memberID without a
// password: the all-in-one uses it to print a demo owner's token.
func (a *API) IssueTokens(ctx context.Context, memberID int64) (Tokens, error) {
	m, err := a.cfg.Store.MemberByID(ctx, memberID)
	if err != nil {
		return Tokens{}, err
	}
	if m.DeletedAt != nil {
		return Tokens{}, store.ErrNotFound
	}
	return a.issue(ctx, m, "")
}

// issue mints an access token for m and, when refresh is empty, a new
// refresh rotation family; otherwise refresh is the already-rotated token.
func (a *API) issue(ctx context.Context, m store.Member, refresh string) (Tokens, error) {
	var exp time.Time
	if refresh == "" {
		tok, rt, err := a.cfg.Store.IssueRefreshToken(ctx, m.ID, a.cfg.RefreshTTL)
		if err != nil {
			return Tokens{}, err
		}
		refresh, exp = tok, rt.ExpiresAt
	}
	access, err := a.signAccess(m)
	if err != nil {
		return Tokens{}, err
	}
	return Tokens{AccessToken: access, TokenType: "Bearer", ExpiresIn: int64(a.cfg.AccessTTL / time.Second),
		RefreshToken: refresh, RefreshExpiresAt: exp, MemberID: m.ID, FamilyID: m.FamilyID, Role: m.Role}, nil
}

func (a *API) signAccess(m store.Member) (string, error) {
	now := a.now()
	c := accessClaims{Fam: m.FamilyID, Role: string(m.Role), RegisteredClaims: jwt.RegisteredClaims{
		Issuer:    tokenIssuer,
		Subject:   strconv.FormatInt(m.ID, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(a.cfg.AccessTTL)),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(a.cfg.Secret)
}

// verify checks an access token: HS256 only, issuer, expiry by the API's clock.
func (a *API) verify(token string) (int64, error) {
	var c accessClaims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return a.cfg.Secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithIssuer(tokenIssuer),
		jwt.WithExpirationRequired(), jwt.WithTimeFunc(a.now))
	if err != nil {
		return 0, err
	}
	id, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil || id <= 0 {
		return 0, errors.New("bad subject")
	}
	return id, nil
}

// authenticate is the huma middleware checking the bearer token of every
// operation that declares the bearer scheme. The caller's family and role are
// read from the store, so a removed member is refused at once and a role change
// takes effect without waiting for the token to expire.
func (a *API) authenticate(ctx huma.Context, next func(huma.Context)) {
	if len(ctx.Operation().Security) == 0 {
		next(ctx)
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
	id, err := a.verify(strings.TrimSpace(tok))
	if err != nil {
		fail("invalid or expired access token")
		return
	}
	m, err := a.cfg.Store.MemberByID(ctx.Context(), id)
	if err != nil || m.DeletedAt != nil {
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			a.log.ErrorContext(ctx.Context(), "api: authenticate", "err", err)
			huma.WriteErr(a.api, ctx, http.StatusServiceUnavailable, "cannot check the token now")
			return
		}
		fail("the token's member no longer exists")
		return
	}
	p := Principal{ID: m.ID, FamilyID: m.FamilyID, Role: m.Role}
	if ctx.Operation().OperationID == streamOperation && !a.streamAuthz(ctx, p) {
		return
	}
	next(huma.WithValue(ctx, principalKey{}, p))
}

type loginInput struct {
	Body struct {
		Login    string `json:"login" minLength:"1" maxLength:"64" doc:"Member id or phone number" example:"1000001"`
		Password string `json:"password" minLength:"1" maxLength:"128"`
	}
}

type refreshInput struct {
	Body struct {
		RefreshToken string `json:"refreshToken" minLength:"1" maxLength:"256"`
	}
}

type tokensOutput struct {
	CacheControl string `header:"Cache-Control"`
	Body         Tokens
}

func (a *API) registerAuth() {
	tags := []string{"auth"}
	huma.Register(a.api, huma.Operation{OperationID: "login", Method: http.MethodPost, Path: "/auth/token", Tags: tags,
		Summary: "Log in",
		Description: "Exchanges a member id or phone and password for an access token (30 min) and a refresh token (7 days). " +
			"Attempts are limited per client address and per login, and a login is locked for a while after repeated " +
			"failures (whether or not it names a member): such attempts are answered 429 with Retry-After in seconds.",
		Errors: []int{http.StatusUnauthorized, http.StatusTooManyRequests}},
		func(ctx context.Context, in *loginInput) (*tokensOutput, error) {
			key := a.guard.key("login", normalLogin(in.Body.Login))
			if err := a.admitLogin(ctx, key); err != nil {
				return nil, err
			}
			m, err := a.cfg.Store.Authenticate(ctx, in.Body.Login, in.Body.Password)
			if errors.Is(err, store.ErrBadCredentials) {
				a.loginFailed(ctx, key, in.Body.Login)
			}
			if err != nil {
				return nil, a.problem(ctx, err, "body")
			}
			a.loginSucceeded(ctx, key)
			t, err := a.issue(ctx, m, "")
			if err != nil {
				return nil, a.problem(ctx, err, "body")
			}
			return &tokensOutput{CacheControl: "no-store", Body: t}, nil
		})
	huma.Register(a.api, huma.Operation{OperationID: "refresh", Method: http.MethodPost, Path: "/auth/refresh", Tags: tags,
		Summary: "Rotate a refresh token",
		Description: "Exchanges a refresh token for a new pair. Each refresh token works once: presenting a rotated " +
			"token again is taken as theft and revokes the whole session (401). Refreshes are limited per client " +
			"address (429 with Retry-After in seconds).",
		Errors: []int{http.StatusUnauthorized, http.StatusTooManyRequests}},
		func(ctx context.Context, in *refreshInput) (*tokensOutput, error) {
			tok, rt, err := a.cfg.Store.RotateRefreshToken(ctx, in.Body.RefreshToken, a.cfg.RefreshTTL)
			if errors.Is(err, store.ErrNotFound) {
				return nil, huma.Error401Unauthorized("unknown refresh token")
			}
			if err != nil {
				return nil, a.problem(ctx, err, "body.refreshToken")
			}
			m, err := a.cfg.Store.MemberByID(ctx, rt.CustomerID)
			if err != nil || m.DeletedAt != nil {
				return nil, huma.Error401Unauthorized("unknown refresh token")
			}
			t, err := a.issue(ctx, m, tok)
			if err != nil {
				return nil, a.problem(ctx, err, "body")
			}
			t.RefreshExpiresAt = rt.ExpiresAt
			return &tokensOutput{CacheControl: "no-store", Body: t}, nil
		})
	huma.Register(a.api, huma.Operation{OperationID: "logout", Method: http.MethodPost, Path: "/auth/logout", Tags: tags,
		Summary: "Log out", Description: "Revokes the refresh token's session.", DefaultStatus: http.StatusNoContent},
		func(ctx context.Context, in *refreshInput) (*struct{}, error) {
			if err := a.cfg.Store.RevokeRefreshToken(ctx, in.Body.RefreshToken); err != nil && !errors.Is(err, store.ErrNotFound) {
				return nil, a.problem(ctx, err, "body.refreshToken")
			}
			return nil, nil
		})
}
