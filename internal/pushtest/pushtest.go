// Package pushtest is a Web Push service for tests: it checks each
// request's VAPID authorization (RFC 8292) and decrypts its aes128gcm
// payload (RFC 8291) with the browser's keys, written here independently of
// the sender (notify.WebPush) so that a mistake in one is not mirrored in
// the other.
package pushtest

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is a push service for tests: each subscription is a path of
// its server. It checks every request as a browser vendor's service would
// (VAPID JWT signed by the announced key, for this origin, not expired; the
// RFC 8291 headers), decrypts the body with the browser's private key and
// auth secret, and answers with the status set for the path (201 unless
// set).
type Server struct {
	t      testing.TB
	srv    *httptest.Server
	vapid  string // the expected application server key, base64url
	mu     sync.Mutex
	keys   map[string]browser
	status map[string]int
	got    []Delivery
	bad    []string
}

type browser struct {
	priv *ecdh.PrivateKey
	auth []byte
}

// Delivery is one message the service accepted: the path it was posted
// to, its TTL and Urgency headers and the decrypted JSON.
type Delivery struct {
	Path    string
	TTL     string
	Urgency string
	JSON    json.RawMessage
}

// New starts a push service accepting messages signed with the VAPID
// public key vapidPublic (base64url); it stops with the test.
func New(t testing.TB, vapidPublic string) *Server {
	p := &Server{t: t, vapid: vapidPublic, keys: map[string]browser{}, status: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

// Subscribe makes a browser's subscription at path: its endpoint and keys
// (base64url), as PushSubscription.toJSON() gives them.
func (p *Server) Subscribe(path string) (endpoint, p256dh, auth string) {
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	secret := make([]byte, 16)
	rand.Read(secret)
	p.mu.Lock()
	p.keys[path] = browser{priv: priv, auth: secret}
	p.mu.Unlock()
	return p.srv.URL + path, base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes()), base64.RawURLEncoding.EncodeToString(secret)
}

// SetStatus makes the service answer code (≥ 300) to posts to path.
func (p *Server) SetStatus(path string, code int) {
	p.mu.Lock()
	p.status[path] = code
	p.mu.Unlock()
}

// Deliveries returns the messages accepted and the requests refused (with
// why: VAPID, encoding, decryption).
func (p *Server) Deliveries() ([]Delivery, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.got), slices.Clone(p.bad)
}

func (p *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	defer p.mu.Unlock()
	fail := func(format string, args ...any) {
		p.bad = append(p.bad, r.URL.Path+": "+fmt.Sprintf(format, args...))
		http.Error(w, "bad request", http.StatusBadRequest)
	}
	b, ok := p.keys[r.URL.Path]
	if !ok {
		fail("unknown subscription")
		return
	}
	if err := CheckVAPID(r.Header.Get("Authorization"), p.vapid, p.srv.URL, time.Now()); err != nil {
		fail("vapid: %v", err)
		return
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "aes128gcm" {
		fail("Content-Encoding %q", ce)
		return
	}
	plain, err := Decrypt(body, b.priv, b.auth)
	if err != nil {
		fail("decrypt: %v", err)
		return
	}
	if !json.Valid(plain) {
		fail("payload %q is not JSON", plain)
		return
	}
	if code := p.status[r.URL.Path]; code >= 300 {
		http.Error(w, http.StatusText(code), code)
		return
	}
	p.got = append(p.got, Delivery{Path: r.URL.Path, TTL: r.Header.Get("TTL"), Urgency: r.Header.Get("Urgency"), JSON: plain})
	w.WriteHeader(http.StatusCreated)
}

// CheckVAPID checks an RFC 8292 Authorization header: "vapid t=JWT, k=key",
// the key the application server's, the JWT signed with it (ES256), for
// origin, expiring in the future and within 24 h, with a contact subject.
func CheckVAPID(h, wantKey, origin string, now time.Time) error {
	rest, ok := strings.CutPrefix(h, "vapid ")
	if !ok {
		return fmt.Errorf("scheme of %q", h)
	}
	params := map[string]string{}
	for _, kv := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		params[k] = v
	}
	if params["k"] != wantKey {
		return fmt.Errorf("k = %q, want %q", params["k"], wantKey)
	}
	rawKey, err := base64.RawURLEncoding.DecodeString(params["k"])
	if err != nil {
		return err
	}
	pub, err := ecdh.P256().NewPublicKey(rawKey)
	if err != nil {
		return err
	}
	x, y := new(big.Int).SetBytes(pub.Bytes()[1:33]), new(big.Int).SetBytes(pub.Bytes()[33:])
	parts := strings.Split(params["t"], ".")
	if len(parts) != 3 {
		return fmt.Errorf("JWT has %d parts", len(parts))
	}
	var hdr struct{ Alg, Typ string }
	if err := decodeJWTPart(parts[0], &hdr); err != nil || hdr.Alg != "ES256" {
		return fmt.Errorf("JWT header %+v: %v", hdr, err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return fmt.Errorf("JWT signature: %d bytes, %v", len(sig), err)
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	key := &ecdsa.PublicKey{Curve: elliptic.P256(), X: x, Y: y}
	if !ecdsa.Verify(key, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
		return errors.New("JWT signature does not verify")
	}
	var claims struct {
		Aud string
		Exp int64
		Sub string
	}
	if err := decodeJWTPart(parts[1], &claims); err != nil {
		return err
	}
	if claims.Aud != origin {
		return fmt.Errorf("aud = %q, want %q", claims.Aud, origin)
	}
	if exp := time.Unix(claims.Exp, 0); !exp.After(now) || exp.After(now.Add(24*time.Hour)) {
		return fmt.Errorf("exp %v not within 24 h after %v", exp, now)
	}
	if !strings.HasPrefix(claims.Sub, "mailto:") && !strings.HasPrefix(claims.Sub, "https:") {
		return fmt.Errorf("sub = %q", claims.Sub)
	}
	return nil
}

func decodeJWTPart(s string, v any) error {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

// Decrypt reverses RFC 8291 on the browser's side: the header
// (salt, record size, the server's ephemeral key), ECDH with the browser's
// key, the two HKDF steps of §3.3-3.4, AES-128-GCM, then the padding
// delimiter of RFC 8188 §2 (one record, so 0x02).
func Decrypt(body []byte, ua *ecdh.PrivateKey, auth []byte) ([]byte, error) {
	if len(body) < 21 {
		return nil, errors.New("body shorter than the header")
	}
	salt, rs, idlen := body[:16], binary.BigEndian.Uint32(body[16:20]), int(body[20])
	if idlen != 65 || len(body) < 21+idlen+17 {
		return nil, fmt.Errorf("keyid length %d, body %d bytes", idlen, len(body))
	}
	asRaw, ct := body[21:21+idlen], body[21+idlen:]
	if uint32(len(ct)) > rs {
		return nil, fmt.Errorf("record of %d bytes larger than rs %d", len(ct), rs)
	}
	as, err := ecdh.P256().NewPublicKey(asRaw)
	if err != nil {
		return nil, err
	}
	shared, err := ua.ECDH(as)
	if err != nil {
		return nil, err
	}
	// HKDF (RFC 5869) by hand: extract = HMAC(salt, ikm); expand of ≤ 32
	// bytes = HMAC(prk, info || 0x01) truncated.
	hm := func(key, data []byte) []byte { m := hmac.New(sha256.New, key); m.Write(data); return m.Sum(nil) }
	expand := func(prk []byte, info string, n int) []byte { return hm(prk, append([]byte(info), 1))[:n] }
	keyInfo := "WebPush: info\x00" + string(ua.PublicKey().Bytes()) + string(asRaw)
	ikm := expand(hm(auth, shared), keyInfo, 32)
	prk := hm(salt, ikm)
	cek := expand(prk, "Content-Encoding: aes128gcm\x00", 16)
	nonce := expand(prk, "Content-Encoding: nonce\x00", 12)
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	plain, err := gcm.Open(nil, nonce, ct, nil)
	if err != nil {
		return nil, err
	}
	i := len(plain) - 1
	for i >= 0 && plain[i] == 0 {
		i--
	}
	if i < 0 || plain[i] != 2 {
		return nil, errors.New("no last-record padding delimiter 0x02")
	}
	return plain[:i], nil
}

// Client returns an HTTP client for the service.
func (p *Server) Client() *http.Client { return p.srv.Client() }
