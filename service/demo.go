package service

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/charging/smfsim"
	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/simulate"
)

// The all-in-one's demo: the seeded families, members and back-office
// accounts, and the simulated SMFs that charge them.

// DemoPassword is the password of every seeded demo member and of the demo
// back-office admin DemoAdminID. It is public: it is seeded only with
// SystemConfig.Demo.
const DemoPassword = "dpcs-demo"

// DemoAdminID is the seeded back-office admin.
const DemoAdminID = 1

// DemoAgentID is the seeded care agent (AGENT: reads what an admin reads,
// changes nothing), phone 010-0000-0002.
const DemoAgentID = 2

// seed writes the demo into an empty SQL store: the seed's "Last 10 MB"
// family (two owners, two children marked as minors, 10 MB) and the
// simulated population. It
// reports whether it seeded; a store that has families is left alone.
func (s *System) seed(ctx context.Context, pop *simulate.Population, families int) (bool, error) {
	ids, err := s.Store.FamilyIDs(ctx, 0, 1)
	if err != nil || len(ids) > 0 {
		return false, err
	}
	hash, err := s.Store.HashPassword(DemoPassword)
	if err != nil {
		return false, err
	}
	add := func(id int64, name string, plan int64, members []store.NewMember) error {
		if _, err := s.Store.CreateFamily(ctx, store.NewFamily{ID: id, Name: name, PlanBytes: plan}, store.System); err != nil {
			return err
		}
		for _, m := range members {
			m.FamilyID, m.PasswordHash = id, hash
			if _, err := s.Store.AddMember(ctx, m, store.System); err != nil {
				return err
			}
		}
		return nil
	}
	demo := []store.NewMember{
		{ID: simulate.CustomerID(DemoFamilyID, 0), Name: "아빠", Phone: "010-0000-0100", Role: policy.RoleOwner},
		{ID: simulate.CustomerID(DemoFamilyID, 1), Name: "엄마", Phone: "010-0000-0101", Role: policy.RoleOwner},
		// Every member of a family plan is a subscriber with a number of
		// its own: the back office finds a family by a child's phone too.
		{ID: simulate.CustomerID(DemoFamilyID, 2), Name: "자녀1", Phone: "010-0000-0102", Role: policy.RoleMember, Minor: true},
		{ID: simulate.CustomerID(DemoFamilyID, 3), Name: "자녀2", Phone: "010-0000-0103", Role: policy.RoleMember, Minor: true},
	}
	if err := add(DemoFamilyID, "김씨 가족 (Last 10 MB)", 10<<20, demo); err != nil {
		return false, err
	}
	if _, err := s.Store.AddMember(ctx, store.NewMember{ID: DemoAdminID, Name: "admin", Phone: "010-0000-0001",
		Role: policy.RoleAdmin, PasswordHash: hash}, store.System); err != nil {
		return false, err
	}
	if _, err := s.Store.AddMember(ctx, store.NewMember{ID: DemoAgentID, Name: "상담원", Phone: "010-0000-0002",
		Role: policy.RoleAgent, PasswordHash: hash}, store.System); err != nil {
		return false, err
	}
	if families > 0 {
		for f := range pop.Families() {
			ms := make([]store.NewMember, len(f.Members))
			for i, m := range f.Members {
				ms[i] = store.NewMember{ID: m.CustomerID, Name: fmt.Sprintf("member %d", m.CustomerID), Role: m.Role,
					Phone: DemoPhone(m.CustomerID)}
			}
			if err := add(f.ID, fmt.Sprintf("family %d", f.ID), f.PlanBytes, ms); err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

// DemoPhone is the phone the demo gives a simulated member (by customer
// id, 010-0001-0000 for 10000), so that the simulated SMFs can name it by
// its MSISDN (DemoMSISDN).
func DemoPhone(cid int64) string { return fmt.Sprintf("010-%04d-%04d", cid/10000%10000, cid%10000) }

// DemoMSISDN is DemoPhone as an SMF names the subscriber.
func DemoMSISDN(cid int64) string {
	return fmt.Sprintf("msisdn-8210%04d%04d", cid/10000%10000, cid%10000)
}

// DemoSubscribers are the subscriberIdentifiers (DemoMSISDN) of the
// members of the all-in-one's demo of families families: whom simulated
// SMFs in another process name (examples/simulator with
// DPCS_SIMULATOR_CHARGING_URL).
func DemoSubscribers(families int) ([]string, error) {
	pop, err := demoPopulation(families)
	if err != nil {
		return nil, err
	}
	return demoSubscribers(pop), nil
}

func demoPopulation(families int) (*simulate.Population, error) {
	return simulate.NewPopulation(1, simulate.WithFamilies(max(families, 1)), simulate.WithFirstFamilyID(demoFirstFamily))
}

func demoSubscribers(pop *simulate.Population) []string {
	var subs []string
	for f := range pop.Families() {
		for _, m := range f.Members {
			subs = append(subs, DemoMSISDN(m.CustomerID))
		}
	}
	return subs
}

// startSMFs starts the demo's simulated PDU sessions against the
// charging interface, for the simulated members.
func (s *System) startSMFs(cfg SystemConfig, pop *simulate.Population, log *slog.Logger) error {
	subs := demoSubscribers(pop)
	sim, err := smfsim.New(smfsim.Config{URL: "http://" + s.Charging.Addr, Token: s.Charging.Token, Subscribers: subs,
		Sessions: cfg.SimulatorSessions, NotifyAddr: "127.0.0.1:0", Seed: 1, Logger: log})
	if err != nil {
		return err
	}
	if err := sim.Start(); err != nil {
		return err
	}
	s.SMFs = sim
	return nil
}
