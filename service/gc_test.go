package service

import (
	"runtime/debug"
	"testing"
)

// The deployables collect at GCPercent unless GOGC is set, which Go's
// runtime has read already.
func TestSetGCPercent(t *testing.T) {
	was := debug.SetGCPercent(100)
	defer debug.SetGCPercent(was)
	if !SetGCPercent(func(string) string { return "" }) {
		t.Error("GOGC unset: not set")
	}
	if got := debug.SetGCPercent(100); got != GCPercent {
		t.Errorf("GOGC unset: the percent is %d", got)
	}
	if SetGCPercent(func(k string) string { return map[string]string{"GOGC": "150"}[k] }) {
		t.Error("GOGC=150: set anyway")
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC=150: the percent moved to %d", got)
	}
}
