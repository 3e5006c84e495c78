// Package limit counts requests per key against a rate (GCRA: N per
// period, in bursts of up to N) and consecutive failures that lock a key
// for a while: the API's brute-force protection of its logins and its
// per-member request limits (doc/security.md). MemoryLimiter serves one
// process with bounded memory; RedisLimiter is shared by every process on
// one Redis or Redis Cluster. Keys are opaque strings chosen by the
// caller.
package limit
