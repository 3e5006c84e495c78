package miniclock

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

func TestFollow(t *testing.T) {
	m := miniredis.RunT(t)
	if err := m.Set("lease", "w1"); err != nil {
		t.Fatal(err)
	}
	m.SetTTL("lease", 30*time.Millisecond)
	if err := m.Set("result", "done"); err != nil {
		t.Fatal(err)
	}
	m.SetTTL("result", time.Hour)

	stop := Follow(m, 5*time.Millisecond)
	for deadline := time.Now().Add(5 * time.Second); m.Exists("lease"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a key with a 30 ms TTL still exists after 5 s")
		}
	}
	if !m.Exists("result") {
		t.Error("a key with an hour's TTL expired")
	}
	if ttl := m.TTL("result"); ttl <= 0 || ttl >= time.Hour {
		t.Errorf("TTL of result = %v, want below an hour and positive", ttl)
	}
	stop()
	stop() // idempotent

	// Stopped: TTLs no longer move.
	ttl := m.TTL("result")
	time.Sleep(30 * time.Millisecond)
	if got := m.TTL("result"); got != ttl {
		t.Errorf("TTL moved after stop: %v → %v", ttl, got)
	}
}

func TestFollowDefaultInterval(t *testing.T) {
	m := miniredis.RunT(t)
	stop := Follow(m, 0)
	stop()
}
