package service

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// The demo (known passwords) is on for the embedded demo only, unless
// DPCS_DEMO says otherwise.
func TestLoadSystemConfigDemo(t *testing.T) {
	const dsn = "dpcs:secret@tcp(10.0.2.1:3306)/dpcs"
	for _, c := range []struct {
		name string
		vars map[string]string
		want bool
	}{
		{"embedded", nil, true},
		{"a MySQL DSN", map[string]string{"DPCS_MYSQL_DSN": dsn}, false},
		{"a MySQL DSN and DPCS_DEMO=1", map[string]string{"DPCS_MYSQL_DSN": dsn, "DPCS_DEMO": "1"}, true},
		{"embedded and DPCS_DEMO=0", map[string]string{"DPCS_DEMO": "0"}, false},
		{"embedded and DPCS_DEMO=false", map[string]string{"DPCS_DEMO": "false"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := LoadSystemConfig(env(c.vars))
			if err != nil || cfg.Demo != c.want {
				t.Errorf("Demo = %v, %v; want %v", cfg.Demo, err, c.want)
			}
		})
	}
	if _, err := LoadSystemConfig(env(map[string]string{"DPCS_DEMO": "maybe"})); err == nil || !strings.Contains(err.Error(), "DPCS_DEMO") {
		t.Errorf("DPCS_DEMO=maybe: %v", err)
	}
}

// Without the demo the all-in-one seeds nothing: no family, no admin with
// the published DemoPassword, no simulated traffic.
func TestSystemWithoutDemoSeedsNoKnownPassword(t *testing.T) {
	ctx := context.Background()
	cfg := testSystemConfig(t)
	cfg.Demo = false
	s, err := StartSystem(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	base := "http://" + s.HTTPAddr
	for _, login := range []string{"1", "010-0000-0001", "1000"} {
		do(t, http.MethodPost, base+"/auth/token", "", `{"login":"`+login+`","password":"`+DemoPassword+`"}`, http.StatusUnauthorized)
	}
	if ids, err := s.Store.FamilyIDs(ctx, 0, 1); err != nil || len(ids) != 0 {
		t.Errorf("families seeded without the demo: %v %v", ids, err)
	}
	if s.Simulator.Running() {
		t.Error("the simulator runs without the demo")
	}
}
