//go:build integration

package quota

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Benchmarks run on the real redis-server of `make bench` (DPCS_TEST_REDIS_ADDR).
// Each reports events/s; the trivial-script benchmarks give the ceiling of the
// same server and client in the same run, so results compare as ratios.

const benchFamilies = 10_000

var trivialScript = redis.NewScript(`return 1`)

func benchEngine(b *testing.B) (*Engine, redis.UniversalClient) {
	b.Helper()
	return benchEngineOn(b, realRedis(b))
}

func benchEngineOn(b *testing.B, rdb redis.UniversalClient, opts ...Option) (*Engine, redis.UniversalClient) {
	b.Helper()
	ctx := context.Background()
	e, err := New(rdb, append([]Option{WithKeyPrefix(fmt.Sprintf("bench%d:", time.Now().UnixNano()))}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Load(ctx); err != nil {
		b.Fatal(err)
	}
	// Provision families of four with a pool no benchmark can drain.
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for f := int64(1); f <= benchFamilies; f++ {
			p.HSet(ctx, e.k.family(f), "plan", 1<<45, "m:1", "1", "m:2", "1", "m:3", "1", "m:4", "1")
			p.HSet(ctx, e.k.constraints(f, 4), "LIMIT:DATA:DAILY", 1<<40, "BLOCK:TIME:START", "0200", "BLOCK:TIME:END", "0300")
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		var cursor uint64
		for {
			ks, next, err := rdb.Scan(ctx, cursor, e.k.prefix+"*", 10_000).Result()
			if err != nil {
				return
			}
			if len(ks) > 0 {
				rdb.Unlink(ctx, ks...)
			}
			if cursor = next; cursor == 0 {
				return
			}
		}
	})
	return e, rdb
}

var benchSeq atomic.Int64

func benchEvent(now time.Time) Event {
	n := benchSeq.Add(1)
	return Event{
		ID: fmt.Sprintf("evt_b%d", n), FamilyID: n%benchFamilies + 1, CustomerID: n%4 + 1,
		Bytes: 1 << 10, AppID: "com.youtube.app", Category: "VIDEO", At: now,
	}
}

func report(b *testing.B, events int) {
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkApply(b *testing.B) {
	e, _ := benchEngine(b)
	ctx, now := context.Background(), time.Now()
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.Apply(ctx, benchEvent(now)); err != nil {
			b.Fatal(err)
		}
	}
	report(b, b.N)
}

func BenchmarkApplyParallel(b *testing.B) {
	e, _ := benchEngine(b)
	ctx, now := context.Background(), time.Now()
	b.SetParallelism(8) // 8 × GOMAXPROCS goroutines
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := e.Apply(ctx, benchEvent(now)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	report(b, b.N)
}

func BenchmarkApplyBatch(b *testing.B) {
	for _, size := range []int{16, 64, 256} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			e, _ := benchEngine(b)
			ctx, now := context.Background(), time.Now()
			evs := make([]Event, size)
			b.ResetTimer()
			for b.Loop() {
				for i := range evs {
					evs[i] = benchEvent(now)
				}
				if _, err := e.ApplyBatch(ctx, evs); err != nil {
					b.Fatal(err)
				}
			}
			report(b, b.N*size)
		})
	}
}

// BenchmarkApplyBatchReplicaAck is the price of WithReplicaAck: batches of
// 256 on the primary of `make integration`'s replicated pair, without and with
// WAIT for its one replica.
func BenchmarkApplyBatchReplicaAck(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []Option
	}{
		{"off", nil},
		{"ack1", []Option{WithReplicaAck(1, 100*time.Millisecond)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			primary, _ := realReplicated(b)
			e, _ := benchEngineOn(b, primary, bc.opts...)
			ctx, now := context.Background(), time.Now()
			evs := make([]Event, 256)
			b.ResetTimer()
			for b.Loop() {
				for i := range evs {
					evs[i] = benchEvent(now)
				}
				if _, err := e.ApplyBatch(ctx, evs); err != nil {
					b.Fatal(err)
				}
			}
			report(b, b.N*len(evs))
		})
	}
}

// BenchmarkApplyBatchParallel is the processor's shape: several partitions,
// each sending its batch of 64 concurrently.
func BenchmarkApplyBatchParallel(b *testing.B) {
	e, _ := benchEngine(b)
	ctx, now := context.Background(), time.Now()
	const size = 64
	b.SetParallelism(2)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		evs := make([]Event, size)
		for pb.Next() {
			for i := range evs {
				evs[i] = benchEvent(now)
			}
			if _, err := e.ApplyBatch(ctx, evs); err != nil {
				b.Error(err)
				return
			}
		}
	})
	report(b, b.N*size)
}

// BenchmarkTrivialEvalSha is the ceiling: EVALSHA of `return 1` with one key,
// sequential and pipelined like ApplyBatch.
func BenchmarkTrivialEvalSha(b *testing.B) {
	for _, size := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			rdb := realRedis(b)
			ctx := context.Background()
			if err := trivialScript.Load(ctx, rdb).Err(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					for range size {
						trivialScript.EvalSha(ctx, p, []string{"family:{1}:bench"})
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			report(b, b.N*size)
		})
	}
}

// BenchmarkApplyMarked is the synchronous decisions' batch: a state
// check, the events and the slot's advance in one pipeline, for batches of
// 1 (a lone decision: the check's whole cost on one decision) and 16.
// Beside events/s it reports the Redis server's time per event
// (redis-µs/event, from INFO commandstats: every script the batch runs),
// the figure that survives a noisy machine.
func BenchmarkApplyMarked(b *testing.B) {
	for _, size := range []int{1, 16} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			e, rdb := benchEngine(b)
			ctx, now := context.Background(), time.Now()
			gen := NewOnTouchGeneration(now, "bench")
			if _, err := e.BeginRebuild(ctx, gen); err != nil {
				b.Fatal(err)
			}
			if err := e.FinishRebuild(ctx, gen, nil); err != nil {
				b.Fatal(err)
			}
			// The benchmark's families name the generation, as restored.
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for f := int64(1); f <= benchFamilies; f++ {
					p.HSet(ctx, e.k.family(f), fieldGeneration, gen)
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			evs := make([]Event, size)
			var n int64
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				for i := range evs {
					evs[i] = benchEvent(now)
				}
				if _, err := e.ApplyMarked(ctx, gen, []Mark{{Stream: "decisions/bench/0", From: n, To: n + 1}}, evs); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.StopTimer()
			report(b, b.N*size)
			stats, err := rdb.Info(ctx, "commandstats").Result()
			if err != nil {
				b.Fatal(err)
			}
			if at := strings.Index(stats, "cmdstat_evalsha:"); at >= 0 {
				var calls, usec int64
				fmt.Sscanf(stats[at:], "cmdstat_evalsha:calls=%d,usec=%d", &calls, &usec)
				b.ReportMetric(float64(usec)/float64(b.N*size), "redis-µs/event")
			}
		})
	}
}
