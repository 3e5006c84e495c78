package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMain runs main itself when DPCS_TEST_RUN_MAIN is set, so a test can
// start the deployable as a process with an environment of its own.
func TestMain(m *testing.M) {
	if os.Getenv("DPCS_TEST_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A misspelled variable stops the start, naming the variable it meant.
func TestMainRefusesUnknownVariable(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DPCS_TEST_RUN_MAIN=1", "DPCS_REDIS_ADR=127.0.0.1:1", "DPCS_KAFKA_BROKERS=127.0.0.1:1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit %v, want status 1; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "DPCS_REDIS_ADR: no deployable reads this variable; did you mean DPCS_REDIS_ADDR?") {
		t.Errorf("output does not name the variable and its nearest:\n%s", out)
	}
}
