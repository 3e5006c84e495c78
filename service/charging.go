package service

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/charging"
	"github.com/dabom/dpcs/service/family"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/store"
)

// ChargingConfig configures the charging interface (service/charging,
// doc/wire-format.md "Charging (Nchf)", doc/runbook.md "Charging"): the
// Nchf_ConvergedCharging routes an SMF calls, on a listener of their own
// with credentials of their own.
type ChargingConfig struct {
	Addr         string         `envconfig:"ADDR" deployables:"server, all-in-one" doc_default:"all-in-one: 127.0.0.1:8090; server: off" desc:"host:port of the Nchf_ConvergedCharging interface (HTTP/2 cleartext and HTTP/1.1, or HTTPS with DPCS_CHARGING_TLS_CERT); off: none"`
	Tokens       []string       `envconfig:"TOKENS" deployables:"server, all-in-one" doc_default:"all-in-one: random, kept in $DPCS_DATA_DIR/charging-token; server: required with DPCS_CHARGING_ADDR" desc:"credentials (comma-separated, each at least 32 bytes) SMFs send as Authorization: Bearer to the charging interface, and only there"`
	TLSCert      string         `envconfig:"TLS_CERT" deployables:"server, all-in-one" desc:"PEM certificate (chain) the charging interface serves HTTPS (HTTP/2 by ALPN) with, with DPCS_CHARGING_TLS_KEY. Empty: cleartext"`
	TLSKey       string         `envconfig:"TLS_KEY" deployables:"server, all-in-one" desc:"PEM private key of DPCS_CHARGING_TLS_CERT: a secret"`
	NRFKeys      string         `envconfig:"NRF_KEYS" deployables:"server, all-in-one" desc:"PEM public keys or certificates of the NRF (ECDSA P-256 or RSA): a bearer credential that is an OAuth2 access token it signed (ES256 or RS256), unexpired, for the scope nchf-convergedcharging and the audience CHF or DPCS_CHARGING_NF_INSTANCE_ID, is taken (TS 33.501 §13.4.1); DPCS_CHARGING_TOKENS becomes optional. Empty: no access tokens"`
	NFInstanceID string         `envconfig:"NF_INSTANCE_ID" deployables:"server, all-in-one" desc:"this CHF's NF instance id (a UUID), accepted as an access token's audience besides the NF type CHF (DPCS_CHARGING_NRF_KEYS)"`
	TLSClientCA  string         `envconfig:"TLS_CLIENT_CA" deployables:"server, all-in-one" desc:"PEM certificates of the CAs that sign the SMFs' client certificates (with DPCS_CHARGING_TLS_CERT): every connection must then present one they signed, and a request on it needs no bearer credential (TS 33.501 §13.3, Nchf's alternative to OAuth2); DPCS_CHARGING_TOKENS becomes optional. Empty: bearer credentials only"`
	APIRoot      string         `envconfig:"API_ROOT" deployables:"server, all-in-one" desc:"apiRoot the Location of a created charging data resource begins with (https://chf.example.net). Empty: the request's scheme and Host"`
	RatingGroups string         `envconfig:"RATING_GROUPS" default:"10=VIDEO,20=GAME,30=SOCIAL,40=MESSAGING,50=WEB,60=MUSIC" deployables:"server, all-in-one" desc:"what each rating group covers: <ratingGroup>=<CATEGORY> or <ratingGroup>=app:<appId>, comma-separated; a rating group not named covers any traffic"`
	MinGrant     int64          `envconfig:"MIN_GRANT" default:"1048576" deployables:"server, all-in-one" desc:"bytes of headroom (the member's limits and the pool less what was used) below which a grant comes as the member's last units (finalUnitIndication), as the engine judging grant steps decides (quota.WithGrantSizes)"`
	Grant        int64          `envconfig:"GRANT" default:"10485760" deployables:"server, all-in-one" desc:"bytes asked for when an SMF's requestedUnit names no volume; the engine's default grant too (quota.WithGrantSizes)"`
	MaxGrant     int64          `envconfig:"MAX_GRANT" default:"104857600" deployables:"server, all-in-one" desc:"most bytes one grant reserves (a larger request is cut to it, by the interface and the engine alike); with the sessions a member may hold, it bounds what a lost session holds until the sweep (doc/runbook.md, Charging)"`
	Validity     time.Duration  `envconfig:"VALIDITY" default:"1h" deployables:"server, all-in-one" desc:"longest validityTime of a grant (1s to 24h); a grant ends sooner at the next boundary that could change its answer"`
	HoldingTime  time.Duration  `envconfig:"HOLDING_TIME" default:"5m" deployables:"server, all-in-one" desc:"quotaHoldingTime of every grant (0 to 24h); a session not updated within its validity plus this is closed and its grants released"`
	Threshold    int            `envconfig:"THRESHOLD" default:"20" deployables:"server, all-in-one" desc:"volumeQuotaThreshold as a percentage of each grant (0 to 99): the SMF reports when that much is left; 0 sends none"`
	RedirectURL  string         `envconfig:"REDIRECT_URL" deployables:"server, all-in-one" desc:"where blocked and last grants send the user (finalUnitAction REDIRECT, the decision as ?reason=): the family app's block screen. Empty: TERMINATE"`
	Networks     []netip.Prefix `envconfig:"NOTIFY_NETWORKS" deployables:"server, all-in-one" desc:"networks (CIDRs, comma-separated) of the SMFs' notifyUri endpoints, reached on any port; elsewhere only public addresses on ports 80 and 443 (doc/security.md)"`
	Sweep        time.Duration  `envconfig:"SWEEP" default:"30s" deployables:"server, all-in-one" desc:"how often sessions past their validity and holding time are closed and their grants released (1s to 1h)"`
	MaxInFlight  int            `envconfig:"MAX_IN_FLIGHT" default:"1024" deployables:"server, all-in-one" desc:"most Nchf requests answered at once (1 to 65536): past it a request is refused at once with 503 NF_CONGESTION and Retry-After (TS 29.500 overload control) instead of waiting behind the others until it times out; within it no SMF takes more than its fair share while another wants one"`
	MaxConns     int            `envconfig:"MAX_CONNECTIONS" default:"4096" deployables:"server, all-in-one" desc:"most connections open at once to the charging interface (1 to 1048576): past it a new connection is closed as soon as it is accepted, so a client that opens them without end costs no memory, and a refused SMF can try another CHF at once; an SMF's one connection carries many requests (HTTP/2)"`
	PeerConns    int            `envconfig:"MAX_CONNECTIONS_PER_PEER" default:"512" deployables:"server, all-in-one" desc:"most of those connections from one IPv4 address or IPv6 /64 (1 to 1048576): one host cannot take every place; raise it when the SMFs reach DPCS through a NAT or a proxy"`
	RecordLinger time.Duration  `envconfig:"RECORD_LINGER" default:"1ms" deployables:"server, all-in-one" desc:"under load (the last write carried more than one step), how long a step's SQL write waits for other sessions' steps to share its statement (up to 16): 0 to 100ms; 0 writes what waits at once"`
}

// DefaultAllInOneChargingAddr is where the all-in-one serves the charging
// interface unless DPCS_CHARGING_ADDR says otherwise.
const DefaultAllInOneChargingAddr = "127.0.0.1:8090"

// Address is the address to listen on: DPCS_CHARGING_ADDR, else def; ""
// when it is off.
func (c ChargingConfig) Address(def string) string {
	switch c.Addr {
	case "":
		return def
	case "off":
		return ""
	}
	return c.Addr
}

// finish checks what readEnv decoded; errors name the variable.
func (c *ChargingConfig) finish(r *envRead) []error {
	var errs []error
	c.Addr = strings.TrimSpace(c.Addr)
	if c.Addr != "" {
		listenAddr(&errs, "DPCS_CHARGING_ADDR", c.Addr)
	}
	c.Tokens = trimList(c.Tokens)
	if c.TLSClientCA != "" && c.TLSCert == "" {
		errs = append(errs, errors.New("DPCS_CHARGING_TLS_CLIENT_CA: needs DPCS_CHARGING_TLS_CERT (client certificates are asked for in the TLS handshake)"))
	}
	r.want(&errs, "DPCS_CHARGING_TOKENS", !slices.ContainsFunc(c.Tokens, func(t string) bool { return len(t) < 32 }),
		"credentials of at least 32 bytes each, comma-separated")
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("DPCS_CHARGING_TLS_CERT, DPCS_CHARGING_TLS_KEY: set both or neither"))
	}
	if _, err := charging.ParseRatingGroups(c.RatingGroups); err != nil {
		errs = append(errs, fmt.Errorf("DPCS_CHARGING_RATING_GROUPS: %w", err))
	}
	r.want(&errs, "DPCS_CHARGING_MIN_GRANT", c.MinGrant >= 0 && c.MinGrant <= policy.MaxBytes, "bytes from 0 to 2^46")
	r.want(&errs, "DPCS_CHARGING_GRANT", c.Grant >= 1 && c.Grant <= policy.MaxBytes, "bytes from 1 to 2^46")
	r.want(&errs, "DPCS_CHARGING_MAX_GRANT", c.MaxGrant >= 1 && c.MaxGrant <= policy.MaxBytes, "bytes from 1 to 2^46")
	if c.MinGrant > c.MaxGrant || c.Grant > c.MaxGrant {
		errs = append(errs, fmt.Errorf("DPCS_CHARGING_MIN_GRANT, DPCS_CHARGING_GRANT, DPCS_CHARGING_MAX_GRANT: want min ≤ max and grant ≤ max, got %d, %d, %d",
			c.MinGrant, c.Grant, c.MaxGrant))
	}
	r.want(&errs, "DPCS_CHARGING_VALIDITY", c.Validity >= time.Second && c.Validity <= 24*time.Hour, "a duration from 1s to 24h")
	r.want(&errs, "DPCS_CHARGING_HOLDING_TIME", c.HoldingTime >= 0 && c.HoldingTime <= 24*time.Hour, "a duration from 0 to 24h")
	r.want(&errs, "DPCS_CHARGING_THRESHOLD", c.Threshold >= 0 && c.Threshold <= 99, "a percentage from 0 to 99")
	r.want(&errs, "DPCS_CHARGING_SWEEP", c.Sweep >= time.Second && c.Sweep <= time.Hour, "a duration from 1s to 1h")
	r.want(&errs, "DPCS_CHARGING_MAX_IN_FLIGHT", c.MaxInFlight >= 1 && c.MaxInFlight <= 65536, "a number from 1 to 65536")
	r.want(&errs, "DPCS_CHARGING_MAX_CONNECTIONS", c.MaxConns >= 1 && c.MaxConns <= 1<<20, "a number from 1 to 1048576")
	r.want(&errs, "DPCS_CHARGING_MAX_CONNECTIONS_PER_PEER", c.PeerConns >= 1 && c.PeerConns <= 1<<20, "a number from 1 to 1048576")
	r.want(&errs, "DPCS_CHARGING_RECORD_LINGER", c.RecordLinger >= 0 && c.RecordLinger <= 100*time.Millisecond, "a duration from 0 to 100ms")
	return errs
}

// options are the charging service's options for this configuration.
func (c ChargingConfig) options(log *slog.Logger, m *Metrics, loopback bool) ([]charging.Option, error) {
	groups, err := charging.ParseRatingGroups(c.RatingGroups)
	if err != nil {
		return nil, fmt.Errorf("DPCS_CHARGING_RATING_GROUPS: %w", err)
	}
	opts := []charging.Option{charging.WithLogger(log), charging.WithRatingGroups(groups),
		charging.WithGrantSizes(c.GrantSizes().Min, c.GrantSizes().Default, c.GrantSizes().Max), charging.WithValidity(c.Validity),
		charging.WithQuotaHoldingTime(c.HoldingTime), charging.WithThreshold(c.Threshold),
		charging.WithSweep(c.Sweep, charging.DefaultClosedRetention), charging.WithNotifyNetworks(loopback, c.Networks...),
		charging.WithRecordLinger(c.RecordLinger)}
	if c.RedirectURL != "" {
		opts = append(opts, charging.WithRedirect(c.RedirectURL))
	}
	if m != nil {
		opts = append(opts, charging.WithHooks(m.ChargingHooks()))
	}
	return opts, nil
}

// GrantSizes are the grant sizes DPCS_CHARGING_MIN_GRANT, _GRANT and
// _MAX_GRANT set, for the engine (quota.WithGrantSizes: what the door's
// grant.lua sizes and marks final) and the interface alike
// (charging.WithGrantSizes: what it asks for and caps a request to): one
// source, so both agree (doc/configuration.md).
func (c ChargingConfig) GrantSizes() quota.GrantSizes {
	return quota.GrantSizes{Default: c.Grant, Max: c.MaxGrant, Min: c.MinGrant}
}

// Charging is a deployable's charging interface: the service, its
// listener ("" for a server that only reauthorizes: StartServerCharging)
// and its first credential (for the banner; "" when only client
// certificates are accepted).
type Charging struct {
	Service *charging.Service
	Addr    string
	Token   string
	srv     *http.Server
	log     *slog.Logger
}

// ChargingDeps are what StartCharging composes the interface from.
type ChargingDeps struct {
	// Charger takes the grant steps: the door's.
	Charger charging.Charger
	Store   *store.Store
	Logger  *slog.Logger
	Metrics *Metrics
	// Tokens are the credentials (the configured ones, or a generated one).
	Tokens []string
	// Loopback lets notifications reach loopback addresses (tests).
	Loopback bool
}

// StartCharging starts the charging service and serves its routes on addr
// (HTTP/2 cleartext and HTTP/1.1, or HTTPS with the configured
// certificate). Close stops both.
func StartCharging(c ChargingConfig, addr string, d ChargingDeps) (*Charging, error) {
	if d.Charger == nil || d.Store == nil {
		return nil, errors.New("charging: a Charger and a store are required")
	}
	if len(d.Tokens) == 0 && c.TLSClientCA == "" && c.NRFKeys == "" {
		return nil, errors.New("DPCS_CHARGING_TOKENS: required to serve the charging interface (DPCS_CHARGING_ADDR) without DPCS_CHARGING_TLS_CLIENT_CA or DPCS_CHARGING_NRF_KEYS")
	}
	var tokens *charging.AccessTokens
	if c.NRFKeys != "" {
		pem, err := os.ReadFile(c.NRFKeys)
		if err != nil {
			return nil, fmt.Errorf("DPCS_CHARGING_NRF_KEYS: %w", err)
		}
		keys, err := charging.ParseNRFKeys(pem)
		if err != nil {
			return nil, fmt.Errorf("DPCS_CHARGING_NRF_KEYS: %w", err)
		}
		tokens = &charging.AccessTokens{Keys: keys}
		if c.NFInstanceID != "" {
			tokens.Instances = []string{c.NFInstanceID}
		}
	}
	var tlsConfig *tls.Config
	if c.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("DPCS_CHARGING_TLS_CERT, DPCS_CHARGING_TLS_KEY: %w", err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if c.TLSClientCA != "" {
			pem, err := os.ReadFile(c.TLSClientCA)
			if err != nil {
				return nil, fmt.Errorf("DPCS_CHARGING_TLS_CLIENT_CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("DPCS_CHARGING_TLS_CLIENT_CA: %s holds no PEM certificate", c.TLSClientCA)
			}
			tlsConfig.ClientAuth, tlsConfig.ClientCAs = tls.RequireAndVerifyClientCert, pool
		}
	}
	svc, log, err := c.newService(d)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = svc.Close(context.Background())
		return nil, fmt.Errorf("DPCS_CHARGING_ADDR: %w", err)
	}
	if c.MaxConns > 0 {
		var refused func()
		if d.Metrics != nil {
			refused = d.Metrics.ChargingConnectionRefused
		}
		perPeer := c.PeerConns
		if perPeer <= 0 { // a ChargingConfig not loaded from the environment
			perPeer = c.MaxConns
		}
		ln = charging.LimitConnections(ln, c.MaxConns, perPeer, refused)
	}
	ch := &Charging{Service: svc, Addr: ln.Addr().String(), log: log,
		srv: charging.NewServer(charging.Handler(svc, charging.HandlerConfig{Tokens: d.Tokens, APIRoot: c.APIRoot, Logger: log,
			ClientCertificates: tlsConfig != nil && tlsConfig.ClientAuth == tls.RequireAndVerifyClientCert, AccessTokens: tokens,
			MaxInFlight: c.MaxInFlight, OnCongested: congested(d.Metrics)}), tlsConfig, log)}
	if len(d.Tokens) > 0 {
		ch.Token = d.Tokens[0]
	}
	go func() {
		var err error
		if tlsConfig != nil {
			err = ch.srv.ServeTLS(ln, "", "")
		} else {
			err = ch.srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("charging interface", "addr", ch.Addr, "err", err)
		}
	}()
	return ch, nil
}

// OnChange reauthorizes the live sessions a family change may affect (for
// family.WithOnChange): a policy, plan, top-up, gift or membership change;
// not an alert level, a password, a request or a note. A member's IMSI
// change closes the member's sessions whose subscriber no longer names it
// (charging.Service.Reidentified).
func (c *Charging) OnChange(_ context.Context, ch family.Change) {
	switch ch.Kind {
	case family.KindPolicy, family.KindPlan, family.KindTopUp, family.KindGift, family.KindMember, family.KindRemoved, family.KindRole:
		c.Service.Changed(ch.FamilyID, ch.Members...)
	case family.KindIMSI:
		c.Service.Reidentified(ch.FamilyID, ch.Members...)
	}
}

// Close stops serving (requests in flight finish within ctx) and the
// service.
func (c *Charging) Close(ctx context.Context) error {
	var err error
	if c.srv != nil {
		err = c.srv.Shutdown(ctx)
	}
	return errors.Join(err, c.Service.Close(ctx))
}

// chargingTokens returns the configured credentials, or the data dir's own
// one (created on first start).
func chargingTokens(cfg SystemConfig) ([]string, error) {
	if len(cfg.Charging.Tokens) > 0 {
		return cfg.Charging.Tokens, nil
	}
	path := filepath.Join(cfg.DataDir, "charging-token")
	if b, err := os.ReadFile(path); err == nil && len(b) >= 32 {
		return []string{string(b)}, nil
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	tok := "chf_" + hex.EncodeToString(b)
	if err := os.WriteFile(path, []byte(tok), 0o600); err != nil {
		return nil, fmt.Errorf("charging token: %w", err)
	}
	return []string{tok}, nil
}

// doorCharger is the door's grant steps: the synchronous decisions' group
// commits (judge.Decisions.Charge, the promise of POST /decisions); false
// when the deployable runs none.
func doorCharger(dec *judge.Decisions) (charging.Charger, bool) {
	if dec == nil {
		return nil, false
	}
	return dec, true
}

// StartServerCharging starts the server deployable's charging interface
// when DPCS_CHARGING_ADDR is set (it is off by default): its credentials
// are DPCS_CHARGING_TOKENS (required), its grant steps the door's
// synchronous decisions, dec (an error when there are none).
//
// When it is off, the charging service still runs without a listener (and
// without a sweep: the servers that serve SMFs sweep), so that the family
// changes this server makes reach the live sessions other servers opened
// (Charging.OnChange: the sessions are in SQL, the notifications go from
// here). Nil only without a door.
func StartServerCharging(c ChargingConfig, st *store.Store, log *slog.Logger, m *Metrics, dec *judge.Decisions) (*Charging, error) {
	addr := c.Address("")
	charger, ok := doorCharger(dec)
	switch {
	case !ok && addr != "":
		return nil, errors.New("DPCS_CHARGING_ADDR: the charging interface needs the door's synchronous decisions (judge.Decisions)")
	case !ok:
		return nil, nil
	case addr == "":
		return startReauthorizer(c, ChargingDeps{Charger: charger, Store: st, Logger: log, Metrics: m})
	}
	return StartCharging(c, addr, ChargingDeps{Charger: charger, Store: st, Logger: log, Metrics: m, Tokens: c.Tokens})
}

// congested is the OnCongested of m (nil without metrics).
func congested(m *Metrics) func(bool) {
	if m == nil {
		return nil
	}
	return m.ChargingCongested
}

// startReauthorizer is the charging service without a listener or a
// sweep: what reauthorizes live sessions after a family change made here.
func startReauthorizer(c ChargingConfig, d ChargingDeps) (*Charging, error) {
	svc, log, err := c.newService(d, charging.WithSweep(0, charging.DefaultClosedRetention))
	if err != nil {
		return nil, err
	}
	return &Charging{Service: svc, log: log}, nil
}

// newService is the charging service of this configuration and d (and
// more options), and the logger it logs to.
func (c ChargingConfig) newService(d ChargingDeps, more ...charging.Option) (*charging.Service, *slog.Logger, error) {
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts, err := c.options(log, d.Metrics, d.Loopback)
	if err != nil {
		return nil, nil, err
	}
	svc, err := charging.New(d.Charger, d.Store, append(opts, more...)...)
	if err != nil {
		return nil, nil, err
	}
	return svc, log, nil
}
