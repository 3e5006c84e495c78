package service

import (
	"strings"
	"testing"
	"time"
)

const testGateway = "gw_test_0123456789abcdef0123456789abcdef"

// TestDecisionConfig: the gateway and group-commit variables are checked
// when read, each error naming its variable.
func TestDecisionConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want string // "" = accepted
	}{
		{"defaults", nil, ""},
		{"tokens", map[string]string{"DPCS_GATEWAY_TOKENS": testGateway + ", " + testGateway + "x"}, ""},
		{"short token", map[string]string{"DPCS_GATEWAY_TOKENS": testGateway + ",short"}, "DPCS_GATEWAY_TOKENS"},
		{"linger", map[string]string{"DPCS_DECISION_LINGER": "1s"}, "DPCS_DECISION_LINGER"},
		{"batch", map[string]string{"DPCS_DECISION_MAX_BATCH": "0"}, "DPCS_DECISION_MAX_BATCH"},
		{"concurrency", map[string]string{"DPCS_DECISION_CONCURRENCY": "0"}, "DPCS_DECISION_CONCURRENCY"},
		{"concurrency high", map[string]string{"DPCS_DECISION_CONCURRENCY": "65"}, "DPCS_DECISION_CONCURRENCY"},
		{"timeout", map[string]string{"DPCS_DECISION_TIMEOUT": "5s"}, "DPCS_DECISION_TIMEOUT"},
	} {
		cfg, err := LoadSystemConfig(func(k string) string { return c.env[k] })
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one naming %s", c.name, err, c.want)
		}
		if c.name == "defaults" && (cfg.DecisionLinger != 200*time.Microsecond || cfg.DecisionMaxBatch != 256 || cfg.DecisionConcurrency != 4 || cfg.DecisionTimeout != 2*time.Second) {
			t.Errorf("defaults: %v %d %v", cfg.DecisionLinger, cfg.DecisionMaxBatch, cfg.DecisionTimeout)
		}
		if c.name == "tokens" && len(cfg.GatewayTokens) != 2 {
			t.Errorf("tokens: %q", cfg.GatewayTokens)
		}
	}
}
