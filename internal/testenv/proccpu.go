package testenv

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PIDCPU is the CPU time (user and system) process pid has used, from
// /proc/<pid>/stat (clock ticks of 10 ms), for benchmarks that count a
// server's CPU beside their own (DPCS_BENCH_SQL_PID names MariaDB's).
// pid "" is 0.
func PIDCPU(tb testing.TB, pid string) time.Duration {
	tb.Helper()
	if pid == "" {
		return 0
	}
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		tb.Fatal(err)
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // after "pid (comm) "
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
