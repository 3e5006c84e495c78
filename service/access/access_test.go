package access

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
)

// recorder collects the Events a subscriber got.
type recorder struct {
	mu     sync.Mutex
	got    []Event
	signal chan struct{}
}

func newRecorder() *recorder { return &recorder{signal: make(chan struct{}, 1)} }

func (r *recorder) add(e Event) {
	r.mu.Lock()
	r.got = append(r.got, e)
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

func (r *recorder) events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.got...)
}

// wait returns the events once there are n, failing after d with those seen.
func (r *recorder) wait(t *testing.T, what string, n int, d time.Duration) []Event {
	t.Helper()
	timeout := time.After(d)
	for {
		if got := r.events(); len(got) >= n {
			return got
		}
		select {
		case <-r.signal:
		case <-timeout:
			t.Fatalf("%s: %d events after %v, want %d: %+v", what, len(r.events()), d, n, r.events())
		}
	}
}

// eventsSuite is what every Events shared by two instances
// (a and b) must do.
func eventsSuite(t *testing.T, a, b Events) {
	ctx := context.Background()
	ra, rb := newRecorder(), newRecorder()
	unsubA := a.Subscribe(ra.add)
	b.Subscribe(rb.add)
	sent := []Event{{Member: 7}, {Member: 8, Session: "abc"}}
	for _, e := range sent {
		if err := a.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	// The publisher's own subscribers have it when Publish returns, once.
	if diff := cmp.Diff(sent, ra.events()); diff != "" {
		t.Errorf("publishing instance's events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sent, rb.wait(t, "other instance", len(sent), 5*time.Second)); diff != "" {
		t.Errorf("other instance's events (-want +got):\n%s", diff)
	}
	unsubA()
	if err := b.Publish(ctx, Event{Member: 9}); err != nil {
		t.Fatal(err)
	}
	rb.wait(t, "other instance, own event", len(sent)+1, 5*time.Second)
	if got := ra.events(); len(got) != len(sent) {
		t.Errorf("unsubscribed subscriber got %+v", got)
	}
}

func TestLocal(t *testing.T) {
	l := NewLocal()
	eventsSuite(t, l, l)
}

func TestRedis(t *testing.T) {
	mr := miniredis.RunT(t)
	one := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	other := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { one.Close(); other.Close() })
	a, b := newRedisBus(t, one), newRedisBus(t, other)
	eventsSuite(t, a, b)

	// A junk message on the channel is skipped.
	rb := newRecorder()
	b.Subscribe(rb.add)
	mr.Publish(DefaultChannel, "not json")
	if err := a.Publish(context.Background(), Event{Member: 10}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Event{{Member: 10}}, rb.wait(t, "after junk", 1, 5*time.Second)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// Redis restarting (messages published meanwhile are lost): once b is
	// subscribed again, its subscribers are told to re-check every stream.
	mr.Close()
	if err := a.Publish(context.Background(), Event{Member: 11}); err == nil {
		t.Error("Publish with Redis down reported no error")
	}
	if err := mr.Restart(); err != nil {
		t.Fatal(err)
	}
	got := rb.wait(t, "after a Redis restart", 2, 20*time.Second) // health check every 3 s
	if diff := cmp.Diff(Event{All: true}, got[1]); diff != "" {
		t.Errorf("event after re-subscription (-want +got):\n%s", diff)
	}

	// Close ends the subscription; it is idempotent.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRedis(context.Background(), nil, "", nil); err == nil {
		t.Error("NewRedis accepted a nil client")
	}
}

func newRedisBus(t *testing.T, rdb redis.UniversalClient) *Redis {
	t.Helper()
	b, err := NewRedis(context.Background(), rdb, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
