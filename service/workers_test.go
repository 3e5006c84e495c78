package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/writebehind"
)

// Story 6's invariant at the deployable level: every event judged once, and
// the usage history in SQL equals the engine's state, duplicates included.
func TestWorkersHistoryEqualsRedis(t *testing.T) {
	h := newHarness(t)
	h.Family(100, 50*mb, 1, 2, 3)
	db := testenv.SQLite(t)
	if err := Migrate(h.Ctx, db); err != nil {
		t.Fatal(err)
	}
	w, err := NewWorkers(mustState(t, h.Engine), db, h.KafkaOpts(), WorkersConfig{
		Processor:   []judge.ProcessorOpt{judge.WithClock(func() time.Time { return h.Now })},
		WriteBehind: []writebehind.Option{writebehind.WithInterval(50 * time.Millisecond)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.Ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	for i := range 60 {
		r := h.Usage(fmt.Sprintf("evt_%d", i%45), 100, int64(i%3+1), int64(i%7+1)*mb, "com.youtube.app", h.Now)
		h.Produce(r) // 15 of the 60 are replays
	}
	var rows, allowed int64
	for deadline := time.Now().Add(20 * time.Second); ; {
		err := db.QueryRow(`SELECT COUNT(*), COALESCE(SUM(CASE WHEN process_result = 'ALLOWED' THEN bytes_used ELSE 0 END), 0) FROM usage_record`).Scan(&rows, &allowed)
		if err != nil {
			t.Fatal(err)
		}
		if rows == 45 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := w.Close(h.Ctx); err != nil {
		t.Fatal(err)
	}
	fs, err := h.Engine.Family(h.Ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if rows != 45 || allowed != fs.Used || fs.Used == 0 || fs.Used > 50*mb {
		t.Fatalf("usage_record: %d rows, %d allowed bytes; Redis used %d of %d", rows, allowed, fs.Used, 50*mb)
	}
}

func TestWorkersWithoutNotifier(t *testing.T) {
	h := newHarness(t)
	db := openSQLite(t)
	w, err := NewWorkers(mustState(t, h.Engine), db, h.KafkaOpts(), WorkersConfig{NoNotifier: true})
	if err != nil {
		t.Fatal(err)
	}
	if w.Notifier != nil || w.Hub != nil {
		t.Fatal("notifier built although NoNotifier")
	}
	ctx, cancel := context.WithCancel(h.Ctx)
	cancel()
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(h.Ctx); err != nil {
		t.Fatal(err)
	}
}
