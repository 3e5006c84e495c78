// Package miniclock makes an embedded miniredis expire keys as time passes,
// as a real Redis does.
//
// miniredis only expires keys when told to (FastForward). Its ClockTTL mode
// advances TTLs on every command by walking every key, which makes each
// command cost as much as the whole keyspace: far too slow for the
// all-in-one's data. Follow advances them on a timer instead.
package miniclock

import (
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Follow advances m's TTLs by the time elapsed, every interval (a second if
// it is not positive), until the returned stop is called. A key therefore
// lives up to one interval longer than its TTL. stop waits for the ticker
// goroutine to end and may be called more than once.
func Follow(m *miniredis.Miniredis, every time.Duration) (stop func()) {
	if every <= 0 {
		every = time.Second
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() { // ends with stop
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-quit:
				return
			case now := <-t.C:
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}
