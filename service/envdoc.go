package service

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// EnvVariable is one variable of the deployables' configuration, as
// doc/configuration.md lists it.
type EnvVariable struct {
	Name        string
	Default     string // "" when none
	Deployables []string
	Meaning     string
}

// EnvVariables lists every DPCS_* variable a deployable reads, by name,
// from the configuration structs' tags. A variable two deployables read
// with a different default or meaning has a row for each.
func EnvVariables() ([]EnvVariable, error) {
	specs := []struct {
		spec    any
		readers string // unless the field's deployables tag says
	}{
		{&Config{}, "processor, server, all-in-one"},
		{&SystemConfig{}, "all-in-one"},
		{&TracingConfig{}, "processor, server, all-in-one, simulator"},
		{&SimulatorConfig{}, "simulator"},
	}
	var out []EnvVariable
	for _, s := range specs {
		vars, err := gatherEnv(s.spec)
		if err != nil {
			return nil, err
		}
		for _, v := range vars {
			row := EnvVariable{Name: v.Key, Default: v.Tags.Get("doc_default"), Meaning: v.Tags.Get("desc")}
			if row.Default == "" {
				row.Default = v.Tags.Get("default")
			}
			readers := v.Tags.Get("deployables")
			if readers == "" {
				readers = s.readers
			}
			if row.Meaning == "" {
				return nil, fmt.Errorf("%s: no desc tag", v.Key)
			}
			i := slices.IndexFunc(out, func(o EnvVariable) bool {
				return o.Name == row.Name && o.Default == row.Default && o.Meaning == row.Meaning
			})
			if i < 0 {
				out = append(out, row)
				i = len(out) - 1
			}
			for _, d := range strings.Split(readers, ",") {
				if d = strings.TrimSpace(d); !slices.Contains(out[i].Deployables, d) {
					out[i].Deployables = append(out[i].Deployables, d)
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b EnvVariable) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// scriptVariables are DPCS_* variables the scripts set for the servers they
// start (scripts/servers.sh, scripts/bench.sh): known, so that a deployable
// started from the same shell does not refuse to start. Variables named
// DPCS_TEST_* and DPCS_CHAOS_* belong to the tests and are known too.
func scriptVariables() []string {
	return []string{"DPCS_CLUSTER_PORTS", "DPCS_CLUSTER_REPLICA_PORTS", "DPCS_MYSQL_BUFFER_POOL", "DPCS_MYSQL_PORT",
		"DPCS_PICKED", "DPCS_PIDS", "DPCS_REDIS_PORT", "DPCS_REPLICA_PORTS", "DPCS_TMP"}
}

// testPrefixes name the tests' own variables.
var testPrefixes = []string{"DPCS_TEST_", "DPCS_CHAOS_"}

// CheckEnv returns an error naming each DPCS_* variable of environ
// (os.Environ's form, NAME=value) that no deployable reads, with the known
// variable nearest to it: a misspelled variable would otherwise be
// silently ignored. allow names more variables to accept (such as the one
// `server admin create --password-env` reads). The mains call it before
// loading their configuration.
func CheckEnv(environ []string, allow ...string) error {
	vars, err := EnvVariables()
	if err != nil {
		return err
	}
	known := slices.Concat(scriptVariables(), allow)
	for _, v := range vars {
		known = append(known, v.Name)
	}
	slices.Sort(known)
	known = slices.Compact(known)
	var errs []error
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix+"_") || slices.Contains(known, name) ||
			slices.ContainsFunc(testPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		errs = append(errs, fmt.Errorf("%s: no deployable reads this variable; did you mean %s? (doc/configuration.md lists them)",
			name, nearest(name, known)))
	}
	return errors.Join(errs...)
}
