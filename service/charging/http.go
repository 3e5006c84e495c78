package charging

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/dabom/dpcs/internal/httpserver"
)

// BasePath is where the service's resources live.
const BasePath = "/nchf-convergedcharging/v3"

// HandlerConfig configures the routes.
type HandlerConfig struct {
	// Tokens are the credentials consumers send as Authorization: Bearer
	// (each at least 32 bytes). A handler without one refuses every
	// request that ClientCertificates or AccessTokens does not let in.
	Tokens []string
	// ClientCertificates lets in, without a bearer credential, a request on
	// a TLS connection whose client certificate the server verified
	// (tls.RequireAndVerifyClientCert against the SMFs' CAs): the NF is
	// authenticated by its certificate (TS 33.501 §13.3; Nchf's security
	// alternative to OAuth2).
	ClientCertificates bool
	// AccessTokens, when set, lets in a bearer credential that is an
	// OAuth2 access token the NRF issued for this service (TS 33.501
	// §13.4.1; AccessTokens.Verify).
	AccessTokens *AccessTokens
	// MaxInFlight bounds the requests answered at once (0: no bound):
	// past it a request is refused at once with 503 NF_CONGESTION and
	// Retry-After (TS 29.500 overload control), instead of queueing
	// behind the others until it times out. It bounds what one SMF's
	// retry storm can take of the database and the engine.
	//
	// Within it no consumer takes more than its fair share while others
	// want one (admission): a lone SMF may use it all, and one whose storm
	// holds it all gives way to another SMF refused meanwhile, whose retry
	// finds a place kept for it; a consumer past its share, or with
	// requests in flight while the places free are kept, is refused with
	// 429 NF_CONGESTION_RISK. A consumer is the NF instance its NRF token
	// names (sub), else its client certificate, else its IPv4 address or
	// IPv6 /64.
	MaxInFlight int
	// OnCongested, when set, is called for each request MaxInFlight
	// refused (for a metric): share is true for a 429 (the consumer's
	// share), false for a 503 (no place for it).
	OnCongested func(share bool)
	// APIRoot, when set (https://chf.example.net), begins the Location of
	// a created resource; otherwise the request's scheme and Host do.
	APIRoot string
	// Logger receives the failures answered 5xx: errors, but a request
	// its client cancelled at debug and one out of time as a warning.
	// Default: discard.
	Logger *slog.Logger
}

// Handler serves the Nchf_ConvergedCharging routes of svc:
//
//	POST /nchf-convergedcharging/v3/chargingdata                           create  → 201 + Location
//	POST /nchf-convergedcharging/v3/chargingdata/{ChargingDataRef}/update  update  → 200
//	POST /nchf-convergedcharging/v3/chargingdata/{ChargingDataRef}/release release → 204
//
// Every error is a ProblemDetails (application/problem+json), with a cause
// where TS 32.291 names one (not for 401, 405, 413 and 415).
func Handler(svc *Service, c HandlerConfig) http.Handler {
	h := &handler{svc: svc, cfg: c, log: c.Logger}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	for _, t := range c.Tokens {
		if t = strings.TrimSpace(t); t != "" {
			h.keys = append(h.keys, sha256.Sum256([]byte(t)))
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+BasePath+"/chargingdata", h.create)
	mux.HandleFunc("POST "+BasePath+"/chargingdata/{ref}/update", h.update)
	mux.HandleFunc("POST "+BasePath+"/chargingdata/{ref}/release", h.release)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		post := r.Clone(r.Context())
		post.Method = http.MethodPost
		if _, pattern := mux.Handler(post); pattern != "/" { // the path exists, the method does not
			w.Header().Set("Allow", http.MethodPost)
			writeProblem(w, &Problem{Status: http.StatusMethodNotAllowed, Detail: "only POST is served here"})
			return
		}
		writeProblem(w, &Problem{Status: http.StatusNotFound, Cause: CauseResourceURIStructNotFound,
			Detail: "no such resource: the routes are " + BasePath + "/chargingdata[/{ChargingDataRef}/update|release]"})
	})
	if c.MaxInFlight > 0 {
		h.admission = newAdmission(c.MaxInFlight, time.Now)
	}
	h.mux = mux
	return h
}

type handler struct {
	svc       *Service
	cfg       HandlerConfig
	log       *slog.Logger
	keys      [][sha256.Size]byte
	admission *admission // MaxInFlight's, nil for no bound
	mux       *http.ServeMux
}

// ServeHTTP authenticates the request, admits it (HandlerConfig.
// MaxInFlight) and serves it.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	consumer, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	if h.admission != nil {
		if refused, share := h.admission.take(consumer, strings.HasSuffix(r.URL.Path, "/release")); refused {
			if h.cfg.OnCongested != nil {
				h.cfg.OnCongested(share)
			}
			w.Header().Set("Retry-After", "1")
			p := &Problem{Status: http.StatusServiceUnavailable, Cause: CauseNFCongestion,
				Detail: "more charging requests at once than this charging function takes: try again after Retry-After"}
			if share {
				p = &Problem{Status: http.StatusTooManyRequests, Cause: CauseNFCongestionRisk,
					Detail: "this consumer has its fair share of the requests this charging function takes at once, and others wait: try again after Retry-After"}
			}
			writeProblem(w, p)
			return
		}
		defer h.admission.done(consumer)
	}
	h.mux.ServeHTTP(w, r)
}

// authenticate lets in a request whose connection's client certificate
// was verified (HandlerConfig.ClientCertificates), else checks the bearer
// credential in constant time, digest against digest, else as an NRF's
// access token (HandlerConfig.AccessTokens). It returns who the consumer
// is, for fairness (admission): the NF instance an NRF token names (also
// on a verified connection: an SCP's connection carries many SMFs'
// requests), else the client certificate, else the peer's address; or it
// answers 401 and false.
func (h *handler) authenticate(w http.ResponseWriter, r *http.Request) (string, bool) {
	auth := r.Header.Get("Authorization")
	scheme, tok, _ := strings.Cut(auth, " ")
	tok = strings.TrimSpace(tok)
	bearer := strings.EqualFold(scheme, "Bearer")
	if h.cfg.ClientCertificates && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		if bearer && h.cfg.AccessTokens != nil {
			if sub, err := h.cfg.AccessTokens.Subject(tok); err == nil && sub != "" {
				return "nf:" + sub, true
			}
		}
		return "cert:" + string(r.TLS.VerifiedChains[0][0].Signature), true
	}
	d := sha256.Sum256([]byte(tok))
	ok := 0
	for _, k := range h.keys {
		ok |= subtle.ConstantTimeCompare(d[:], k[:])
	}
	consumer := ""
	if ok != 1 && h.cfg.AccessTokens != nil && bearer {
		if sub, err := h.cfg.AccessTokens.Subject(tok); err == nil {
			ok = 1
			if sub != "" {
				consumer = "nf:" + sub
			}
		} else {
			h.log.Debug("charging: access token refused", "err", err)
		}
	}
	if ok != 1 || !bearer {
		// RFC 6750 §3.1: no error code when no credential was sent.
		challenge := `Bearer realm="dpcs-charging"`
		if auth != "" {
			challenge += `, error="invalid_token"`
		}
		w.Header().Set("WWW-Authenticate", challenge)
		writeProblem(w, &Problem{Status: http.StatusUnauthorized, Detail: "a charging credential is required (DPCS_CHARGING_TOKENS)"})
		return "", false
	}
	if consumer == "" {
		consumer = peer(r.RemoteAddr)
	}
	return consumer, true
}

// peer is who a connection's remote address is from: its IPv4 address,
// or its IPv6 address's /64 (a host may use any address of its /64);
// addr itself when it is neither (a unix socket's).
func peer(addr string) string {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return addr
	}
	a := ap.Addr().Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64) // an IPv6 address always has a /64
		return p.String()
	}
	return a.String()
}

// body reads and decodes the request for op.
func (h *handler) body(w http.ResponseWriter, r *http.Request, op Op) (*ChargingDataRequest, *Problem) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, &Problem{Status: http.StatusUnsupportedMediaType, Detail: "the body must be application/json"}
	}
	b, err := readAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes), r.ContentLength)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, &Problem{Status: http.StatusRequestEntityTooLarge, Detail: "the body is larger than " + strconv.Itoa(MaxRequestBytes) + " bytes"}
		}
		return nil, &Problem{Status: http.StatusBadRequest, Cause: CauseInvalidMsgFormat, Detail: "the body could not be read", Err: err}
	}
	req, err := DecodeRequest(b, op)
	if err != nil {
		return nil, asProblem(err)
	}
	return req, nil
}

// readAll is io.ReadAll starting with room for size bytes (the request's
// Content-Length, when it is within MaxRequestBytes), so a body is read
// into one allocation.
func readAll(rd io.Reader, size int64) ([]byte, error) {
	if size <= 0 || size > MaxRequestBytes {
		size = 512
	}
	b := make([]byte, 0, size+1) // +1: the read that finds the end needs no room to grow
	for {
		n, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

func (h *handler) create(w http.ResponseWriter, r *http.Request) {
	req, p := h.body(w, r, OpCreate)
	if p != nil {
		h.fail(w, r, p)
		return
	}
	ref, a, err := h.svc.createReply(r.Context(), req)
	if err != nil {
		h.fail(w, r, asProblem(err))
		return
	}
	w.Header().Set("Location", h.root(r)+BasePath+"/chargingdata/"+ref)
	writeReply(w, http.StatusCreated, a)
}

func (h *handler) update(w http.ResponseWriter, r *http.Request) {
	req, p := h.body(w, r, OpUpdate)
	if p != nil {
		h.fail(w, r, p)
		return
	}
	a, err := h.svc.updateReply(r.Context(), r.PathValue("ref"), req)
	if err != nil {
		h.fail(w, r, asProblem(err))
		return
	}
	writeReply(w, http.StatusOK, a)
}

func (h *handler) release(w http.ResponseWriter, r *http.Request) {
	req, p := h.body(w, r, OpRelease)
	if p != nil {
		h.fail(w, r, p)
		return
	}
	if err := h.svc.release(r.Context(), r.PathValue("ref"), req); err != nil {
		h.fail(w, r, asProblem(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// fail answers p, logging a 5xx: as an error, unless the request's own
// context ended it. A consumer that hung up or reset its stream (canceled)
// is no failure of the charging function, and a retry of the same
// invocation is answered as if it had waited; the request's time bound
// running out (deadline) is the server overloaded, a warning.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, p *Problem) {
	if p.Status >= 500 {
		attrs := []any{"method", r.Method, "path", r.URL.Path, "cause", p.Cause, "err", p.Err}
		switch ended := r.Context().Err(); {
		case ended == nil || !errors.Is(p.Err, ended):
			h.log.Error("charging: request failed", attrs...)
		case errors.Is(ended, context.Canceled):
			h.log.Debug("charging: the client went away before the answer", attrs...)
		default:
			h.log.Warn("charging: the request ran out of time", attrs...)
		}
	}
	writeProblem(w, p)
}

// root is the apiRoot the Location begins with.
func (h *handler) root(r *http.Request) string {
	if h.cfg.APIRoot != "" {
		return strings.TrimSuffix(h.cfg.APIRoot, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// writeReply writes a step's answer as it was encoded for its record (the
// same bytes json.Marshal writes: encodeResponse).
func writeReply(w http.ResponseWriter, status int, a reply) {
	if a.body == nil {
		writeJSON(w, status, a.resp)
		return
	}
	writeBody(w, status, a.body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, asProblem(err))
		return
	}
	writeBody(w, status, b)
}

func writeBody(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// NewServer returns the hardened server for h (internal/httpserver's
// bounds and headers) speaking HTTP/1.1 and HTTP/2: cleartext HTTP/2 with
// prior knowledge when tlsConfig is nil (as an SMF's SBI client speaks it),
// HTTP/2 over TLS (ALPN h2) otherwise — serve it with ServeTLS then.
// Every route answers by itself once its context ends at the handler
// timeout (each wait of a step ends with it: the session's lock, SQL, the
// Charger), so the routes run self-timed, as POST /decisions does, without
// http.TimeoutHandler's goroutine and copy of every answer.
func NewServer(h http.Handler, tlsConfig *tls.Config, log *slog.Logger) *http.Server {
	srv := httpserver.New(h, httpserver.Config{HandlerTimeout: 10 * time.Second, Logger: log,
		SelfTimed: func(*http.Request) bool { return true }})
	var p http.Protocols
	p.SetHTTP1(true)
	if tlsConfig != nil {
		p.SetHTTP2(true)
		srv.TLSConfig = tlsConfig
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	srv.Protocols = &p
	// HTTP/2 frames of at most 16 KiB (a request is a few hundred bytes;
	// Go's default, 1 MiB, lets any client make each connection hold a
	// 1 MiB read buffer before it authenticates).
	srv.HTTP2 = &http.HTTP2Config{MaxReadFrameSize: 16 << 10}
	return srv
}
