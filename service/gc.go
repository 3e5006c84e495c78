package service

import "runtime/debug"

// GCPercent is the server's and the processor's GOGC unless the
// environment sets one: their live heaps are small and every decision and
// every judged event allocates, so at Go's default (collect when the heap
// has doubled) they collect many times a second. Collecting at 5 times the
// live heap took 13–23 % off the server's CPU per POST /decisions decision
// and a mean 17–19 % off the processor's own CPU per judged event, for
// more memory: the processor's peak resident memory flat out rose from 147 to
// 309 MiB (doc/benchmarks.md, "Peers" and "The processor's GOGC"). The
// all-in-one keeps Go's default: its heap holds the embedded Redis and
// Kafka.
const GCPercent = 400

// SetGCPercent sets the process's GOGC to GCPercent unless getenv("GOGC")
// names one, and reports whether it did. It is for a deployable's main:
// the collector is the process's.
func SetGCPercent(getenv func(string) string) bool {
	if getenv("GOGC") != "" {
		return false
	}
	debug.SetGCPercent(GCPercent)
	return true
}
