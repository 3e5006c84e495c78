package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The processor deployable's consumer group and topic
// (service/judge.ProcessorGroup, envelope.TopicUsageEvents). The records
// are written here as doc/wire-format.md says, not with the SDK's
// envelope package: this module links its peers, whose dependencies do not
// build beside DPCS's newer ones.
const (
	processorGroup   = "processor-usage-group"
	topicUsageEvents = "usage-events"
	// The processor's write-behind (writebehind.DefaultGroup) and its topic
	// (envelope.TopicUsagePersist).
	writeBehindGroup  = "usage-persist-writer"
	topicUsagePersist = "usage-persist"
)

// usageRecord is a DATA_USAGE record (doc/wire-format.md): the envelope
// JSON, keyed by the family id, with its eventType header.
func usageRecord(id string, at time.Time, fid, cid, bytes int64) *kgo.Record {
	key := strconv.FormatInt(fid, 10)
	value := `{"eventId":"` + id + `","eventType":"DATA_USAGE","subType":null,"timestamp":"` + at.UTC().Format(time.RFC3339Nano) +
		`","payload":{"familyId":` + key + `,"customerId":` + strconv.FormatInt(cid, 10) +
		`,"appId":"com.kakao.talk","bytesUsed":` + strconv.FormatInt(bytes, 10) + `}}`
	return &kgo.Record{Topic: topicUsageEvents, Key: []byte(key), Value: []byte(value),
		Headers: []kgo.RecordHeader{{Key: "eventType", Value: []byte("DATA_USAGE")}}}
}

// pipeline is the processor deployable (examples/processor) in a process of
// its own, fed usage events through Kafka by this process, as a carrier's
// network feeds it: judged by the processor, written to SQL by its
// write-behind, announced by its notifier.
type pipeline struct {
	proc *child
	cl   *kgo.Client
	adm  *kadm.Client
	gen  *generator
	seq  atomic.Int64
	run  string
	// admin is the processor's admin address, profiles the directory of
	// its CPU profiles ("": none).
	admin, profiles string
}

func (p *pipeline) stop() {
	if p.cl != nil {
		p.cl.Close()
	}
	if p.proc != nil {
		p.proc.stop()
	}
}

// startPipeline starts the processor deployable on kafka, Redis and dsn
// (the state the server's rebuild left) and waits until it judges.
func startPipeline(ctx context.Context, cfg config, kafka, dsn string, gen *generator) (*pipeline, error) {
	adminPort, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &pipeline{gen: gen, run: randomHex(4), admin: "127.0.0.1:" + strconv.Itoa(adminPort)}
	env := append(baseEnv(), "DPCS_KAFKA_BROKERS="+kafka, "DPCS_REDIS_ADDR="+cfg.redis, "DPCS_MYSQL_DSN="+dsn,
		"DPCS_ADMIN_ADDR="+p.admin, "DPCS_LOG_LEVEL=warn")
	env = append(env, cfg.processorEnv...)
	if cfg.profile != "" {
		p.profiles = cfg.profile
		env = append(env, "DPCS_ADMIN_PPROF=true")
	}
	if p.proc, _, err = start(cfg.dir, "processor", cfg.processor, nil, env, false); err != nil {
		return nil, err
	}
	if p.cl, err = kgo.NewClient(kgo.SeedBrokers(kafka), kgo.ProducerLinger(2*time.Millisecond),
		kgo.MaxBufferedRecords(200_000)); err != nil {
		p.stop()
		return nil, err
	}
	p.adm = kadm.NewClient(p.cl)
	// Judging once an event sent now is committed.
	before, err := p.consumed(ctx)
	if err != nil {
		p.stop()
		return nil, err
	}
	err = untilReady(ctx, p.proc, cfg.dir, "the processor's first judgements", 500*time.Millisecond, func() error {
		if err := p.produce(ctx, rand.New(rand.NewPCG(1, 2)), 10, nil); err != nil {
			return err
		}
		n, err := p.consumed(ctx)
		if err == nil && n <= before {
			err = errors.New("nothing committed yet")
		}
		return err
	})
	if err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// consumed is the processor group's committed offsets of usage-events,
// summed: how many events it has judged and committed.
func (p *pipeline) consumed(ctx context.Context) (int64, error) {
	os, err := p.adm.FetchOffsets(ctx, processorGroup)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return 0, nil // nothing committed yet
	}
	if err != nil {
		return 0, err
	}
	var n int64
	for _, o := range os[topicUsageEvents] {
		if o.Err == nil && o.At > 0 {
			n += o.At
		}
	}
	return n, nil
}

// behind is how many usage-persist records the write-behind has not
// committed yet: what the earlier steps' decisions left it to write.
func (p *pipeline) behind(ctx context.Context) (int64, error) {
	ends, err := p.adm.ListEndOffsets(ctx, topicUsagePersist)
	if err != nil {
		return 0, err
	}
	committed, err := p.adm.FetchOffsets(ctx, writeBehindGroup)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return 0, err
	}
	var n int64
	var failed error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			failed = o.Err
			return
		}
		at := int64(0)
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil && c.At > 0 {
			at = c.At
		}
		n += max(o.Offset-at, 0)
	})
	return n, failed
}

// drain waits until the write-behind has written what the earlier steps'
// decisions left (the server deployable produces usage-persist records and
// writes none): a backlog would be written during the pipeline's steps and
// its MariaDB and Kafka CPU counted to their events. It waits while the
// backlog shrinks, and fails once it has not for a minute.
func (p *pipeline) drain(ctx context.Context, say func(string, ...any)) error {
	return untilDrained(ctx, "the write-behind's backlog", "the write-behind to write", p.behind, say)
}

// produce sends n usage events of 1 KB; done (if not nil) is called as
// each is acknowledged.
func (p *pipeline) produce(ctx context.Context, rng *rand.Rand, n int, done func(error)) error {
	now := time.Now()
	for range n {
		fid, cid := p.gen.member(rng)
		rec := usageRecord("pp_"+p.run+"_"+strconv.FormatInt(p.seq.Add(1), 36), now, fid, cid, 1024)
		p.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if done != nil {
				done(err)
			}
		})
	}
	return nil
}

// step feeds the processor at rate events/s (0: as fast as it judges, at
// most maxLag events ahead of its commits) for warmup + d and returns the
// events it judged in the window d as the window's calls.
func (p *pipeline) step(ctx context.Context, rate float64, warmup, d time.Duration, mark func()) (window, error) {
	const maxLag = 50_000
	// The records are produced with the run's context, not the step's: kgo
	// fails a batch whose first record's context ended, and the step's
	// last records share batches with the next step's first.
	run := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var produced, failed atomic.Int64
	var firstErr atomic.Pointer[error]
	var consumed atomic.Int64
	base, err := p.consumed(ctx)
	if err != nil {
		return window{}, err
	}
	consumed.Store(base)
	var wg sync.WaitGroup
	wg.Go(func() { // the group's progress, four times a second
		for ctx.Err() == nil {
			if n, err := p.consumed(ctx); err == nil {
				consumed.Store(n)
			}
			_ = sleep(ctx, 250*time.Millisecond)
		}
	})
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
		start := time.Now()
		tick := 10 * time.Millisecond
		for i := int64(1); ctx.Err() == nil; i++ {
			n := 500
			if rate > 0 {
				due := int64(rate * time.Since(start).Seconds())
				n = int(due - produced.Load())
			} else if produced.Load()-(consumed.Load()-base) > maxLag {
				n = 0
			}
			if n > 0 {
				produced.Add(int64(n))
				_ = p.produce(run, rng, n, func(err error) {
					if err != nil && run.Err() == nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, &err)
					}
				})
			}
			_ = sleep(ctx, tick)
		}
	})
	var w window
	if err := sleep(ctx, warmup); err != nil {
		return w, err
	}
	c0, err := p.consumed(ctx)
	if err != nil {
		return w, err
	}
	mark()
	t0 := time.Now()
	if err := sleep(ctx, d); err != nil {
		return w, err
	}
	c1, err := p.consumed(ctx)
	w.Elapsed = time.Since(t0)
	mark()
	cancel()
	wg.Wait()
	w.Calls, w.Errors = c1-c0, failed.Load()
	if e := firstErr.Load(); e != nil {
		w.FirstErr = *e
	}
	return w, err
}
