package service

import (
	"fmt"

	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/simulate"
)

// StoreOptions are the SQL store's options for this configuration, beyond
// the zone and the logger each deployable gives: the family size
// (DPCS_FAMILY_MAX_MEMBERS) and its notes (DPCS_FAMILY_MAX_NOTES).
func (c Config) StoreOptions() []store.Option {
	var opts []store.Option
	if c.FamilyMaxMembers > 0 {
		opts = append(opts, store.WithMaxFamilyMembers(c.FamilyMaxMembers))
	}
	if c.FamilyMaxNotes > 0 {
		opts = append(opts, store.WithMaxFamilyNotes(c.FamilyMaxNotes))
	}
	return opts
}

// checkLimits checks the abuse limits' variables (doc/security.md,
// "Limits").
func (c Config) checkLimits(r *envRead) []error {
	var errs []error
	r.want(&errs, "DPCS_FAMILY_MAX_MEMBERS", c.FamilyMaxMembers >= 1 && c.FamilyMaxMembers <= 100, "a whole number from 1 to 100")
	r.want(&errs, "DPCS_FAMILY_MAX_NOTES", c.FamilyMaxNotes >= 1 && c.FamilyMaxNotes <= 100_000, "a whole number from 1 to 100000")
	r.want(&errs, "DPCS_STREAMS_PER_SESSION", c.Streams.PerSession >= 1 && c.Streams.PerSession <= 1000, "a whole number from 1 to 1000")
	r.want(&errs, "DPCS_STREAMS_PER_MEMBER", c.Streams.PerMember >= 1 && c.Streams.PerMember <= 1000, "a whole number from 1 to 1000")
	r.want(&errs, "DPCS_STREAMS_MAX", c.Streams.Total >= 1 && c.Streams.Total <= 1_000_000, "a whole number from 1 to 1000000")
	return errs
}

// checkDemoLimits refuses limits the demo's seed would break: its simulated
// families have up to simulate.MaxFamilySize members.
func (c SystemConfig) checkDemoLimits() error {
	n := c.FamilyMaxMembers
	if n == 0 {
		n = store.DefaultMaxFamilyMembers
	}
	if c.Demo && n < simulate.MaxFamilySize {
		return fmt.Errorf("DPCS_FAMILY_MAX_MEMBERS: the demo's families have up to %d members: want at least %d with DPCS_DEMO=1, got %d",
			simulate.MaxFamilySize, simulate.MaxFamilySize, n)
	}
	return nil
}
