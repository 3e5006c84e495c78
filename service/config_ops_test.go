package service

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dabom/dpcs/service/api/backoffice"
)

func TestConfigOperationsMetrics(t *testing.T) {
	own := prometheus.NewRegistry()
	for _, c := range []struct {
		urls    []string
		own     prometheus.Gatherer
		want    []string // "own" or a scraped URL
		wantErr bool
	}{
		{nil, nil, nil, false},
		{nil, own, []string{"own"}, false},
		{[]string{"http://p1:9090/metrics", "https://p2/metrics"}, own, []string{"own", "http://p1:9090/metrics", "https://p2/metrics"}, false},
		{[]string{"p1:9090/metrics"}, own, nil, true},
		{[]string{"ftp://p1/metrics"}, nil, nil, true},
		{[]string{"http:///metrics"}, nil, nil, true},
	} {
		gs, err := Config{OperationsMetricsURLs: c.urls}.OperationsMetrics(c.own)
		if (err != nil) != c.wantErr {
			t.Errorf("%v: err = %v, want error %v", c.urls, err, c.wantErr)
			continue
		}
		var got []string
		for _, g := range gs {
			if s, ok := g.(*backoffice.MetricsScraper); ok {
				got = append(got, s.URL)
			} else {
				got = append(got, "own")
			}
		}
		if len(got) != len(c.want) {
			t.Errorf("%v: sources %v, want %v", c.urls, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%v: sources %v, want %v", c.urls, got, c.want)
			}
		}
	}
}
