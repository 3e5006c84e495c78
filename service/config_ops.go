package service

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dabom/dpcs/service/api/backoffice"
)

// OperationsMetrics returns the metrics sources of the operations view: own
// (this process's registry; nil: none) and a MetricsScraper per
// DPCS_OPERATIONS_METRICS_URLS entry, which must be http or https URLs.
func (c Config) OperationsMetrics(own prometheus.Gatherer) ([]prometheus.Gatherer, error) {
	var out []prometheus.Gatherer
	if own != nil {
		out = append(out, own)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for _, raw := range c.OperationsMetricsURLs {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("DPCS_OPERATIONS_METRICS_URLS: %q is not an http(s) URL", raw)
		}
		out = append(out, backoffice.NewMetricsScraper(u.String(), client))
	}
	return out, nil
}
