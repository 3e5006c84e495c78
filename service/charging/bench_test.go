package charging_test

import (
	"bytes"
	"net/http"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/service/charging"
)

// BenchmarkUpdateOverH2C is the interface's own cost of an update: HTTP/2
// cleartext, decoding, the session's read and conditional write in SQLite
// and the answer, with the in-memory grant engine standing in for the
// door (whose cost is the door's).
// Sub-benchmarks: the session kept in memory (the default: one statement
// per update) and not kept (WithSessionCache(0): the session read, then
// written), for the ratio in one run (doc/benchmarks.md). On SQLite (in
// this process) by default; on the MariaDB of DPCS_TEST_MYSQL_DSN when it
// is set, whose CPU is counted too when DPCS_BENCH_SQL_PID names its
// process.
// The 16-caller ones update 16 sessions at once (steps of one moment share
// a transaction).
func BenchmarkUpdateOverH2C(b *testing.B) {
	b.Run("kept", func(b *testing.B) { benchmarkUpdate(b, 1) })
	b.Run("read", func(b *testing.B) { benchmarkUpdate(b, 1, charging.WithSessionCache(0)) })
	b.Run("kept-16-callers", func(b *testing.B) { benchmarkUpdate(b, 16) })
	b.Run("read-16-callers", func(b *testing.B) { benchmarkUpdate(b, 16, charging.WithSessionCache(0)) })
}

func benchmarkUpdate(b *testing.B, callers int, opts ...charging.Option) {
	e := newBenchEnv(b, opts...)
	api := serveB(b, e.svc)
	c := h2c()
	e.fake.SetPool(family, 1<<45)
	refs := make([]string, callers)
	for i := range refs {
		ref, _, err := e.svc.Create(b.Context(), request("imsi-"+childIMSI, 0, ask(10, 1*mib, -1)))
		if err != nil {
			b.Fatal(err)
		}
		refs[i] = ref
	}
	sqlPID := os.Getenv("DPCS_BENCH_SQL_PID")
	cpu0, sql0 := processCPU(b), testenv.PIDCPU(b, sqlPID)
	b.ResetTimer()
	var wg sync.WaitGroup
	for k, ref := range refs {
		wg.Go(func() {
			for i := k; i < b.N; i += callers {
				body := mustJSONB(b, request("imsi-"+childIMSI, uint32(i+1), ask(10, 1*mib, 1024)))
				req, _ := http.NewRequest(http.MethodPost, api+"/chargingdata/"+ref+"/update", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := c.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("update %d: %d", i, resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
	// The process is the SMF, the interface and SQLite: its CPU is the
	// update's all-process CPU (the in-memory engine's aside).
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/update")
	if sqlPID != "" {
		b.ReportMetric(float64((testenv.PIDCPU(b, sqlPID)-sql0).Microseconds())/float64(b.N), "sql-cpu-µs/update")
	}
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
