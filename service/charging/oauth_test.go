package charging_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dabom/dpcs/service/charging"
)

// nrf signs access tokens as an NRF does: ES256 with an ECDSA P-256 key, or
// RS256 with an RSA key.
type nrf struct {
	ec  *ecdsa.PrivateKey
	rsa *rsa.PrivateKey
}

func newNRF(t testing.TB) *nrf {
	t.Helper()
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return &nrf{ec: ec, rsa: rk}
}

// pem is the NRF's public keys as PEM (PUBLIC KEY blocks).
func (n *nrf) pem(t testing.TB) []byte {
	t.Helper()
	var out []byte
	for _, k := range []any{&n.ec.PublicKey, &n.rsa.PublicKey} {
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})...)
	}
	return out
}

// token is a JWS of claims with alg, signed by the NRF's key for alg.
func (n *nrf) token(t testing.TB, alg string, claims map[string]any) string {
	t.Helper()
	seg := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	input := seg(map[string]string{"alg": alg, "typ": "JWT"}) + "." + seg(claims)
	d := sha256.Sum256([]byte(input))
	var sig []byte
	switch alg {
	case "ES256":
		r, s, err := ecdsa.Sign(rand.Reader, n.ec, d[:])
		if err != nil {
			t.Fatal(err)
		}
		sig = append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
	case "RS256":
		var err error
		if sig, err = rsa.SignPKCS1v15(rand.Reader, n.rsa, crypto.SHA256, d[:]); err != nil {
			t.Fatal(err)
		}
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// An NRF's access token (TS 33.501 §13.4.1) is taken when it is signed by
// the NRF (ES256 or RS256), unexpired, for the scope
// nchf-convergedcharging, and addressed to a CHF (the NF type, or this
// CHF's instance id); anything else is refused.
func TestAccessTokens(t *testing.T) {
	n, stranger := newNRF(t), newNRF(t)
	keys, err := charging.ParseNRFKeys(n.pem(t))
	if err != nil || len(keys) != 2 {
		t.Fatalf("ParseNRFKeys: %d keys, %v", len(keys), err)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	v := &charging.AccessTokens{Keys: keys, Instances: []string{"5f6c1d3e-0000-4000-8000-00000000c0f0"}, Now: func() time.Time { return now }}
	claims := func(mod func(map[string]any)) map[string]any {
		c := map[string]any{"iss": "nrf-1", "sub": "smf-1", "aud": "CHF", "scope": "nchf-convergedcharging",
			"exp": now.Add(time.Hour).Unix()}
		if mod != nil {
			mod(c)
		}
		return c
	}
	for name, tc := range map[string]struct {
		tok  string
		want bool
	}{
		"ES256":                {n.token(t, "ES256", claims(nil)), true},
		"RS256":                {n.token(t, "RS256", claims(nil)), true},
		"this instance as aud": {n.token(t, "ES256", claims(func(c map[string]any) { c["aud"] = []string{"5f6c1d3e-0000-4000-8000-00000000c0f0"} })), true},
		"two scopes":           {n.token(t, "ES256", claims(func(c map[string]any) { c["scope"] = "nudm-sdm nchf-convergedcharging" })), true},
		"expired":              {n.token(t, "ES256", claims(func(c map[string]any) { c["exp"] = now.Add(-time.Minute).Unix() })), false},
		"no exp":               {n.token(t, "ES256", claims(func(c map[string]any) { delete(c, "exp") })), false},
		"another scope":        {n.token(t, "ES256", claims(func(c map[string]any) { c["scope"] = "nchf-spendinglimitcontrol" })), false},
		"another NF":           {n.token(t, "ES256", claims(func(c map[string]any) { c["aud"] = "PCF" })), false},
		"another NRF's key":    {stranger.token(t, "ES256", claims(nil)), false},
		"alg none":             {n.token(t, "none", claims(nil)), false},
		"not a JWS":            {"a-static-credential", false},
		"signature of another": {swapSignature(n.token(t, "ES256", claims(nil)), n.token(t, "ES256", claims(func(c map[string]any) { c["sub"] = "x" }))), false},
	} {
		if err := v.Verify(tc.tok); (err == nil) != tc.want {
			t.Errorf("%s: %v, want taken %v", name, err, tc.want)
		}
	}
	if sub, err := v.Subject(n.token(t, "ES256", claims(nil))); err != nil || sub != "smf-1" {
		t.Errorf("Subject: %q %v, want the consumer's NF instance smf-1", sub, err)
	}
	if sub, err := v.Subject(stranger.token(t, "ES256", claims(nil))); err == nil || sub != "" {
		t.Errorf("Subject of another NRF's token: %q %v", sub, err)
	}
	// A token verified once is taken from memory until it expires (and
	// its skew): the keys no longer matter, the clock does.
	once := n.token(t, "ES256", claims(func(c map[string]any) { c["sub"] = "smf-2" }))
	if sub, err := v.Subject(once); err != nil || sub != "smf-2" {
		t.Fatalf("Subject: %q %v", sub, err)
	}
	v.Keys = nil
	if sub, err := v.Subject(once); err != nil || sub != "smf-2" {
		t.Errorf("a token verified before, again: %q %v", sub, err)
	}
	if err := v.Verify(n.token(t, "ES256", claims(nil))); err == nil {
		t.Error("a token never verified was taken without the NRF's keys")
	}
	now = now.Add(time.Hour + 31*time.Second)
	if sub, err := v.Subject(once); err == nil {
		t.Errorf("a remembered token past its exp: %q taken", sub)
	}
	if _, err := charging.ParseNRFKeys([]byte("no PEM here")); err == nil {
		t.Error("ParseNRFKeys took no key")
	}
}

// The routes take an NRF's access token as a bearer credential when
// HandlerConfig.AccessTokens is set; a forged one is 401.
func TestRoutesTakeAccessTokens(t *testing.T) {
	e := newEnv(t)
	n := newNRF(t)
	keys, err := charging.ParseNRFKeys(n.pem(t))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := charging.NewServer(charging.Handler(e.svc, charging.HandlerConfig{AccessTokens: &charging.AccessTokens{Keys: keys}}), nil, nil)
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	srv := "http://" + ln.Addr().String() + charging.BasePath
	good := n.token(t, "ES256", map[string]any{"aud": "CHF", "scope": "nchf-convergedcharging", "exp": time.Now().Add(time.Hour).Unix()})
	if r := post(t, h2c(), srv+"/chargingdata", good, mustJSON(t, request("imsi-"+childIMSI, 0, ask(10, 1*mib, -1)))); r.status != http.StatusCreated {
		t.Errorf("with the NRF's token: %d %s", r.status, r.body)
	}
	forged := good[:strings.LastIndexByte(good, '.')+1] + "AAAA"
	if r := post(t, h2c(), srv+"/chargingdata", forged, mustJSON(t, request("imsi-"+childIMSI, 1, ask(10, 1*mib, -1)))); r.status != http.StatusUnauthorized {
		t.Errorf("with a forged token: %d %s", r.status, r.body)
	}
}

// swapSignature is token a with b's signature.
func swapSignature(a, b string) string {
	return a[:strings.LastIndexByte(a, '.')] + b[strings.LastIndexByte(b, '.'):]
}

// What an NRF token costs a request: verified (an ES256 or RS256 check),
// and remembered (what every request after an SMF's first pays).
func BenchmarkAccessTokens(b *testing.B) {
	n := newNRF(b)
	keys, err := charging.ParseNRFKeys(n.pem(b))
	if err != nil {
		b.Fatal(err)
	}
	claims := map[string]any{"sub": "smf-1", "aud": "CHF", "scope": "nchf-convergedcharging", "exp": time.Now().Add(time.Hour).Unix()}
	for _, alg := range []string{"ES256", "RS256"} {
		tok := n.token(b, alg, claims)
		b.Run(alg+"/verified", func(b *testing.B) {
			for b.Loop() {
				v := &charging.AccessTokens{Keys: keys} // nothing remembered
				if _, err := v.Subject(tok); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(alg+"/remembered", func(b *testing.B) {
			v := &charging.AccessTokens{Keys: keys}
			for b.Loop() {
				if _, err := v.Subject(tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
