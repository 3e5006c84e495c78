package charging_test

import (
	"bytes"
	"net/http"
	"testing"
)

// BenchmarkUpdateOverH2C is the interface's own cost of an update: HTTP/2
// cleartext, decoding, the session's read and conditional write in SQLite
// and the answer, with the in-memory grant engine standing in for the
// door (whose cost is the door's).
func BenchmarkUpdateOverH2C(b *testing.B) {
	e := newBenchEnv(b)
	api := serveB(b, e.svc)
	c := h2c()
	ref, _, err := e.svc.Create(b.Context(), request("imsi-"+childIMSI, 0, ask(10, 1*mib, -1)))
	if err != nil {
		b.Fatal(err)
	}
	e.fake.SetPool(family, 1<<45)
	b.ResetTimer()
	for i := range b.N {
		body := mustJSONB(b, request("imsi-"+childIMSI, uint32(i+1), ask(10, 1*mib, 1024)))
		req, _ := http.NewRequest(http.MethodPost, api+"/chargingdata/"+ref+"/update", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("update %d: %d", i, resp.StatusCode)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
}
