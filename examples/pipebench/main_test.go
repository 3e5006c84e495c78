package main

import (
	"context"
	"strings"
	"testing"

	"github.com/dabom/dpcs/internal/bench/pipebench"
)

func TestParseRatesAndLabels(t *testing.T) {
	rs, err := parseRates("5000, 20000,max")
	if err != nil || len(rs) != 3 || rs[0] != 5000 || rs[2] != pipebench.MaxRate {
		t.Fatalf("%v %v", rs, err)
	}
	for _, bad := range []string{"", "x", "-5", "0"} {
		if _, err := parseRates(bad); err == nil {
			t.Errorf("rates %q accepted", bad)
		}
	}
	for r, want := range map[float64]string{5000: "5k", 50000: "50k", 1500: "1500", pipebench.MaxRate: "max"} {
		if got := label(r); got != want {
			t.Errorf("label(%v) = %q, want %q", r, got, want)
		}
	}
	if thin(1000000) != "1,000,000" || thin(999) != "999" {
		t.Error(thin(1000000), thin(999))
	}
}

func TestRunRefusesMissingServers(t *testing.T) {
	t.Setenv("DPCS_REDIS_ADDR", "")
	t.Setenv("DPCS_REDIS_CLUSTER", "")
	t.Setenv("DPCS_MYSQL_DSN", "")
	for _, args := range [][]string{
		{},
		{"-redis", "127.0.0.1:1"},
		{"-redis", "127.0.0.1:1", "-redis-cluster", "127.0.0.1:2", "-mysql", "x"},
		{"-redis", "127.0.0.1:1", "-mysql", "x", "-rates", "fast"},
		{"-redis", "127.0.0.1:1", "-mysql", "x", "-scale", "zero"},
		{"-nosuchflag"},
		{"-ceiling-only", "-redis-cluster", "127.0.0.1:2"}, // the ceiling is one server's
	} {
		if err := run(context.Background(), args); err == nil {
			t.Errorf("%s: accepted", strings.Join(args, " "))
		}
	}
}
