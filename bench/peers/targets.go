package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	pbcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pbrls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/gubernator-io/gubernator/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// generator picks the member a decision is about: one of the seeded
// families (ids 1..families) at random, one of its four members (f*10+1 ..
// f*10+4, recoverybench's population), the same population for every target.
type generator struct{ families int }

func (g *generator) member(rng *rand.Rand) (fid, cid int64) {
	fid = 1 + rng.Int64N(int64(g.families))
	return fid, fid*10 + 1 + rng.Int64N(4)
}

// dpcs is the DPCS server deployable and its Kafka, each a process.
type dpcs struct {
	server, kafka *child
	kafkaAddr     string
	url, token    string
	chargingURL   string // the charging interface (Nchf over h2c)
	chargingToken string
	client        *http.Client
	gen           *generator
	seq           atomic.Int64
	run           string
	admin         string // the server's admin address
	profiles      string // where profileWindow writes, "" for none
}

// profileWindow takes a CPU profile of the server over the step's window
// (DPCS_ADMIN_PPROF), written to the profile directory as the step's name.
func (d *dpcs) profileWindow(ctx context.Context, step string, dur time.Duration) {
	if d.profiles != "" {
		profile(ctx, d.admin, filepath.Join(d.profiles, "server-"+fileName(step)+".pprof"), dur)
	}
}

// fileName is step in lower case with every character but a-z and 0-9
// made '-'.
func fileName(step string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(step))
}

// profile fetches, in the background, a CPU profile of dur less a second
// from the pprof endpoint of the admin address admin into file.
func profile(ctx context.Context, admin, file string, dur time.Duration) {
	go func() {
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admin, max(int(dur.Seconds())-1, 1))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode == http.StatusOK {
			_ = os.WriteFile(file, b, 0o644)
		}
	}()
}

func (d *dpcs) stop() {
	if d.server != nil {
		d.server.stop()
		d.server = nil
	}
	if d.kafka != nil {
		d.kafka.stop()
		d.kafka = nil
	}
}

// startDPCS starts Kafka, rebuilds Redis from the seeded SQL (`server
// rebuild`, a new state generation) and starts the server deployable as an
// operator would run it, waiting until it serves.
func startDPCS(ctx context.Context, cfg config, self, dsn string, say func(string, ...any)) (*dpcs, error) {
	d := &dpcs{gen: &generator{families: cfg.families}, token: "gw_peers_" + randomHex(20), run: randomHex(4),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.inFlight + cfg.callers, IdleConnTimeout: time.Minute}}}
	var kafka string
	var err error
	if d.kafka, kafka, err = start(cfg.dir, "kafka", self, []string{"kafka"}, baseEnv(), true); err != nil {
		return nil, err
	}
	d.kafkaAddr = kafka
	httpPort, err := freePort()
	if err != nil {
		d.stop()
		return nil, err
	}
	adminPort, err := freePort()
	if err != nil {
		d.stop()
		return nil, err
	}
	chargingPort, err := freePort()
	if err != nil {
		d.stop()
		return nil, err
	}
	d.chargingURL, d.chargingToken = "http://127.0.0.1:"+strconv.Itoa(chargingPort), "chg_peers_"+randomHex(20)
	env := append(baseEnv(),
		"DPCS_CHARGING_ADDR=127.0.0.1:"+strconv.Itoa(chargingPort), "DPCS_CHARGING_TOKENS="+d.chargingToken,
		"DPCS_KAFKA_BROKERS="+kafka, "DPCS_REDIS_ADDR="+cfg.redis, "DPCS_MYSQL_DSN="+dsn,
		"DPCS_JWT_SECRET="+randomHex(32), "DPCS_GATEWAY_TOKENS="+d.token,
		"DPCS_HTTP_ADDR=127.0.0.1:"+strconv.Itoa(httpPort), "DPCS_ADMIN_ADDR=127.0.0.1:"+strconv.Itoa(adminPort),
		"DPCS_LOG_LEVEL=warn",
		// The weekly summaries' catch-up (a minute after the start, every
		// family of the freshly seeded database) would run during the steps
		// and be counted to their calls: 0.6 of a core of the server and 0.5
		// of MariaDB's at 80,000 families. -server-env may turn it on.
		"DPCS_WEEKLY_SUMMARY=off")
	env = append(env, cfg.serverEnv...)
	d.admin = "127.0.0.1:" + strconv.Itoa(adminPort)
	if cfg.profile != "" {
		d.profiles = cfg.profile
		env = append(env, "DPCS_ADMIN_PPROF=true")
	}
	say("rebuilding Redis from SQL (server rebuild)")
	rb, _, err := start(cfg.dir, "server-rebuild", cfg.server, []string{"rebuild"}, env, false)
	if err != nil {
		d.stop()
		return nil, err
	}
	if err := <-rb.done; err != nil {
		d.stop()
		return nil, fmt.Errorf("server rebuild: %w (see %s/server-rebuild.log)", err, cfg.dir)
	}
	if d.server, _, err = start(cfg.dir, "server", cfg.server, nil, env, false); err != nil {
		d.stop()
		return nil, err
	}
	d.url = "http://127.0.0.1:" + strconv.Itoa(httpPort)
	// Serving once a decision is answered.
	if err := untilReady(ctx, d.server, cfg.dir, "the server's first decision", 100*time.Millisecond, func() error {
		return d.call(1)(ctx, rand.New(rand.NewPCG(1, 2)))
	}); err != nil {
		d.stop()
		return nil, err
	}
	return d, nil
}

// call posts n usage events of 1 KB in one request, as a gateway does.
func (d *dpcs) call(n int) call {
	return func(ctx context.Context, rng *rand.Rand) error {
		var b strings.Builder
		b.Grow(160 * n)
		b.WriteString(`{"events":[`)
		now := time.Now().UTC().Format(time.RFC3339Nano)
		for i := range n {
			fid, cid := d.gen.member(rng)
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"eventId":"pb_` + d.run + `_` + strconv.FormatInt(d.seq.Add(1), 36) + `","timestamp":"` + now +
				`","familyId":` + strconv.FormatInt(fid, 10) + `,"customerId":` + strconv.FormatInt(cid, 10) +
				`,"appId":"com.kakao.talk","bytesUsed":1024}`)
		}
		b.WriteString(`]}`)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/decisions", strings.NewReader(b.String()))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+d.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := d.client.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("POST /decisions: %d %s", resp.StatusCode, body)
		}
		if got := strings.Count(string(body), `"decision":`); got != n {
			return fmt.Errorf("POST /decisions: %d decisions for %d events", got, n)
		}
		return nil
	}
}

// grpcPeer is a peer served over gRPC from a child process.
type grpcPeer struct {
	child *child
	conn  *grpc.ClientConn
	call  caller
}

func (g *grpcPeer) stop() {
	if g.conn != nil {
		g.conn.Close()
	}
	g.child.stop()
}

// limitMonth is the rate limits' period: a month, as a data plan.
const limitMonth = 30 * 24 * time.Hour

// startGubernator starts gubernator in a process of its own: one counter
// per member (token bucket, a month's period), each call hitting it by one.
func startGubernator(cfg config, self string, gen *generator) (*grpcPeer, error) {
	c, addr, err := start(cfg.dir, "gubernator", self, []string{"gubernator", "-cache", strconv.Itoa(cfg.families * 5)}, baseEnv(), true)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.stop()
		return nil, err
	}
	cl := gubernator.NewV1Client(conn)
	g := &grpcPeer{child: c, conn: conn}
	g.call = func(n int) call {
		return func(ctx context.Context, rng *rand.Rand) error {
			req := &gubernator.GetRateLimitsReq{Requests: make([]*gubernator.RateLimitReq, n)}
			for i := range n {
				_, cid := gen.member(rng)
				req.Requests[i] = &gubernator.RateLimitReq{Name: "data", UniqueKey: "m" + strconv.FormatInt(cid, 10),
					Hits: 1, Limit: 1 << 40, Duration: limitMonth.Milliseconds(), Algorithm: gubernator.Algorithm_TOKEN_BUCKET}
			}
			resp, err := cl.GetRateLimits(ctx, req)
			if err != nil {
				return err
			}
			if len(resp.Responses) != n {
				return fmt.Errorf("gubernator: %d answers for %d requests", len(resp.Responses), n)
			}
			for _, r := range resp.Responses {
				if r.Error != "" {
					return errors.New("gubernator: " + r.Error)
				}
			}
			return nil
		}
	}
	return g, nil
}

// startEnvoy starts envoy's ratelimit service in a process of its own on
// the same redis-server: one descriptor per member, a limit per day.
func startEnvoy(ctx context.Context, cfg config, self string, gen *generator) (*grpcPeer, error) {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	env, err := envoyEnv(cfg.dir, cfg.redis, ports[0], ports[1], ports[2])
	if err != nil {
		return nil, err
	}
	c, _, err := start(cfg.dir, "envoy-ratelimit", self, []string{"envoy-ratelimit"}, append(baseEnv(), env...), false)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(ports[0]), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.stop()
		return nil, err
	}
	cl := pbrls.NewRateLimitServiceClient(conn)
	g := &grpcPeer{child: c, conn: conn}
	g.call = func(n int) call {
		return func(ctx context.Context, rng *rand.Rand) error {
			req := &pbrls.RateLimitRequest{Domain: envoyDomain, HitsAddend: 1, Descriptors: make([]*pbcommon.RateLimitDescriptor, n)}
			for i := range n {
				_, cid := gen.member(rng)
				req.Descriptors[i] = &pbcommon.RateLimitDescriptor{Entries: []*pbcommon.RateLimitDescriptor_Entry{
					{Key: "member", Value: strconv.FormatInt(cid, 10)}}}
			}
			resp, err := cl.ShouldRateLimit(ctx, req)
			if err != nil {
				return err
			}
			if len(resp.Statuses) != n {
				return fmt.Errorf("envoy ratelimit: %d statuses for %d descriptors", len(resp.Statuses), n)
			}
			if resp.OverallCode != pbrls.RateLimitResponse_OK {
				return fmt.Errorf("envoy ratelimit: %s", resp.OverallCode)
			}
			return nil
		}
	}
	if err := untilReady(ctx, c, cfg.dir, "envoy ratelimit's first answer", 200*time.Millisecond, func() error {
		return g.call(1)(ctx, rand.New(rand.NewPCG(1, 2)))
	}); err != nil {
		g.stop()
		return nil, err
	}
	return g, nil
}

// debitScript is the least a Redis quota can do per decision: read a
// member's counter, refuse past its limit, else add the bytes.
var debitScript = redis.NewScript(`
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local bytes, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
if used + bytes > limit then
  return {0, limit - used}
end
redis.call('INCRBY', KEYS[1], bytes)
return {1, limit - used - bytes}
`)

// script calls debitScript from this process, one call or one pipeline of
// calls per step call.
type script struct {
	rdb *redis.Client
	gen *generator
}

func newScript(ctx context.Context, rdb *redis.Client, gen *generator) (*script, error) {
	if err := debitScript.Load(ctx, rdb).Err(); err != nil {
		return nil, err
	}
	return &script{rdb: rdb, gen: gen}, nil
}

func (s *script) key(rng *rand.Rand) string {
	_, cid := s.gen.member(rng)
	return "peers:debit:{" + strconv.FormatInt(cid, 10) + "}"
}

func (s *script) call(n int) call {
	const limit = 1 << 40
	return func(ctx context.Context, rng *rand.Rand) error {
		if n == 1 {
			return debitScript.EvalSha(ctx, s.rdb, []string{s.key(rng)}, 1024, limit).Err()
		}
		p := s.rdb.Pipeline()
		for range n {
			debitScript.EvalSha(ctx, p, []string{s.key(rng)}, 1024, limit)
		}
		_, err := p.Exec(ctx)
		return err
	}
}
