package charging

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
	"time"
)

// AccessTokens verifies the OAuth2 access tokens an NRF issues to SMFs for
// this service (TS 33.501 §13.4.1, TS 29.510 AccessTokenClaims): a JWS
// signed by one of the NRF's keys (ES256 or RS256), unexpired, for the
// scope "nchf-convergedcharging", and addressed to a CHF — its audience
// naming the NF type CHF or one of this CHF's NF instance ids. The NRF's
// keys are provisioned out of band (ParseNRFKeys). Its fields must not
// change once it verified a token: a token verified is remembered until
// it expires (Subject).
type AccessTokens struct {
	// Keys are the NRF's public keys (*ecdsa.PublicKey on P-256, or
	// *rsa.PublicKey); a token verifies with any of them.
	Keys []crypto.PublicKey
	// Instances are this CHF's NF instance ids, accepted as the audience
	// besides the NF type "CHF".
	Instances []string
	// Now is the clock expiry is checked by (default time.Now); a token is
	// taken up to Skew past its exp (default 30 s).
	Now  func() time.Time
	Skew time.Duration

	// verified remembers the tokens verified (by digest) until they
	// expire: an SMF sends the same token with every request for its
	// lifetime, and an ES256 or RS256 verification costs more CPU than
	// the rest of an update.
	mu       sync.Mutex
	verified map[[sha256.Size]byte]verifiedToken
}

// verifiedToken is a token verified: its subject, taken until its exp.
type verifiedToken struct {
	sub string
	exp time.Time
}

// maxVerified bounds the tokens remembered; past it one is forgotten.
const maxVerified = 1024

// Scope is the OAuth2 scope of Nchf_ConvergedCharging (its service name).
const Scope = "nchf-convergedcharging"

// ParseNRFKeys reads the NRF's public keys from PEM: PUBLIC KEY blocks
// (PKIX) and CERTIFICATE blocks (their keys). Only ECDSA P-256 and RSA keys
// are taken; none at all is an error.
func ParseNRFKeys(b []byte) ([]crypto.PublicKey, error) {
	var keys []crypto.PublicKey
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		var pub any
		switch block.Type {
		case "PUBLIC KEY":
			k, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("charging: NRF key: %w", err)
			}
			pub = k
		case "CERTIFICATE":
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("charging: NRF certificate: %w", err)
			}
			pub = c.PublicKey
		default:
			continue
		}
		switch k := pub.(type) {
		case *ecdsa.PublicKey:
			if k.Curve.Params().Name != "P-256" {
				return nil, errors.New("charging: NRF key: an ECDSA key must be on P-256 (ES256)")
			}
			keys = append(keys, k)
		case *rsa.PublicKey:
			keys = append(keys, k)
		default:
			return nil, fmt.Errorf("charging: NRF key: %T is neither ECDSA P-256 nor RSA", pub)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("charging: no NRF public key or certificate in the PEM")
	}
	return keys, nil
}

// errToken is every refusal of a token (its reason is for logs only).
var errToken = errors.New("charging: access token refused")

// Verify reports why tok is not an access token for this service (nil:
// it is one).
func (a *AccessTokens) Verify(tok string) error {
	_, err := a.Subject(tok)
	return err
}

// Subject is Verify that also returns the token's subject (its sub claim:
// the NF instance of the consumer it was issued to; "" when it names
// none). A token it verified before is taken from memory until it
// expires.
func (a *AccessTokens) Subject(tok string) (string, error) {
	key := sha256.Sum256([]byte(tok))
	now := a.now()
	a.mu.Lock()
	v, ok := a.verified[key]
	if ok && now.After(v.exp) {
		delete(a.verified, key)
		ok = false
	}
	a.mu.Unlock()
	if ok {
		return v.sub, nil
	}
	sub, exp, err := a.verify(tok, now)
	if err != nil {
		return "", err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.verified == nil {
		a.verified = map[[sha256.Size]byte]verifiedToken{}
	}
	if len(a.verified) >= maxVerified { // the expired go first, else any one
		for k, o := range a.verified {
			if now.After(o.exp) {
				delete(a.verified, k)
			}
		}
		for k := range a.verified {
			if len(a.verified) < maxVerified {
				break
			}
			delete(a.verified, k)
		}
	}
	a.verified[key] = verifiedToken{sub: sub, exp: exp}
	return sub, nil
}

func (a *AccessTokens) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// verify checks tok at now, returning its subject and until when it is
// taken (its exp, with the skew).
func (a *AccessTokens) verify(tok string, now time.Time) (string, time.Time, error) {
	head, rest, ok := strings.Cut(tok, ".")
	body, sig, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || strings.Contains(sig, ".") {
		return "", time.Time{}, fmt.Errorf("%w: not a JWS", errToken)
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if err := decodeSegment(head, &h); err != nil {
		return "", time.Time{}, fmt.Errorf("%w: header: %w", errToken, err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%w: signature: %w", errToken, err)
	}
	digest := sha256.Sum256([]byte(head + "." + body))
	if !a.signed(h.Alg, digest[:], raw) {
		return "", time.Time{}, fmt.Errorf("%w: not signed by the NRF (alg %q)", errToken, h.Alg)
	}
	var c struct {
		Aud   json.RawMessage `json:"aud"`
		Scope string          `json:"scope"`
		Exp   *float64        `json:"exp"`
		Sub   string          `json:"sub"`
	}
	if err := decodeSegment(body, &c); err != nil {
		return "", time.Time{}, fmt.Errorf("%w: claims: %w", errToken, err)
	}
	skew := 30 * time.Second
	if a.Skew > 0 {
		skew = a.Skew
	}
	var until time.Time
	if c.Exp != nil {
		until = time.Unix(int64(*c.Exp), 0).Add(skew)
	}
	if c.Exp == nil || now.After(until) {
		return "", time.Time{}, fmt.Errorf("%w: expired or without exp", errToken)
	}
	if !slices.Contains(strings.Fields(c.Scope), Scope) {
		return "", time.Time{}, fmt.Errorf("%w: scope %q lacks %s", errToken, c.Scope, Scope)
	}
	var aud []string
	if json.Unmarshal(c.Aud, &aud) != nil {
		var one string
		if json.Unmarshal(c.Aud, &one) != nil {
			return "", time.Time{}, fmt.Errorf("%w: aud is neither a string nor strings", errToken)
		}
		aud = []string{one}
	}
	if !slices.ContainsFunc(aud, func(s string) bool { return s == "CHF" || slices.Contains(a.Instances, s) }) {
		return "", time.Time{}, fmt.Errorf("%w: audience %v is not this CHF", errToken, aud)
	}
	return c.Sub, until, nil
}

// signed reports whether sig is alg's signature of digest by one of the
// keys: ES256 (r and s, 32 bytes each) or RS256 (PKCS #1 v1.5).
func (a *AccessTokens) signed(alg string, digest, sig []byte) bool {
	for _, k := range a.Keys {
		switch k := k.(type) {
		case *ecdsa.PublicKey:
			if alg == "ES256" && len(sig) == 64 &&
				ecdsa.Verify(k, digest, new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
				return true
			}
		case *rsa.PublicKey:
			if alg == "RS256" && rsa.VerifyPKCS1v15(k, crypto.SHA256, digest, sig) == nil {
				return true
			}
		}
	}
	return false
}

// decodeSegment decodes a JWS segment's JSON into v.
func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
