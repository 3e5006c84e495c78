package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/internal/testenv/storetest"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/api"
	"github.com/dabom/dpcs/service/store"
)

// TestFamilyMaxMembers: DPCS_FAMILY_MAX_MEMBERS reaches the store the
// deployables open (Config.StoreOptions), is checked at start, and the demo
// (whose simulated families have up to 10 members) refuses less than 10.
func TestFamilyMaxMembers(t *testing.T) {
	c, err := LoadConfig(env(map[string]string{"DPCS_FAMILY_MAX_MEMBERS": "3"}))
	if err != nil {
		t.Fatal(err)
	}
	st := storetest.New(t, testenv.SQLite(t))
	s, err := store.New(st.DB, c.StoreOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateFamily(st.Ctx, store.NewFamily{ID: 1, Name: "f"}, store.System); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		_, err := s.AddMember(st.Ctx, store.NewMember{FamilyID: 1, Name: fmt.Sprint("m", i), Role: policy.RoleOwner}, store.System)
		if full := errors.Is(err, store.ErrFamilyFull); full != (i == 3) || !full && err != nil {
			t.Errorf("member %d of a family of at most 3: %v", i+1, err)
		}
	}
	if c, err := LoadConfig(env(nil)); err != nil || c.FamilyMaxMembers != store.DefaultMaxFamilyMembers {
		t.Errorf("unset: %d, %v; want %d", c.FamilyMaxMembers, err, store.DefaultMaxFamilyMembers)
	}
	for _, v := range []string{"0", "101", "ten"} {
		if _, err := LoadConfig(env(map[string]string{"DPCS_FAMILY_MAX_MEMBERS": v})); err == nil || !strings.Contains(err.Error(), "DPCS_FAMILY_MAX_MEMBERS") {
			t.Errorf("DPCS_FAMILY_MAX_MEMBERS=%s: %v", v, err)
		}
	}
	// The server reads the same variables and seeds nothing: 9 is fine.
	sc, err := LoadSystemConfig(env(map[string]string{"DPCS_FAMILY_MAX_MEMBERS": "9", "DPCS_DATA_DIR": t.TempDir()}))
	if err != nil {
		t.Fatalf("families of at most 9: %v", err)
	}
	if s, err := StartSystem(context.Background(), sc, nil); err == nil || !strings.Contains(err.Error(), "DPCS_FAMILY_MAX_MEMBERS") {
		if s != nil {
			s.Close(context.Background())
		}
		t.Errorf("the all-in-one's demo with families of at most 9: %v", err)
	}
}

// TestLoadConfigStreams: DPCS_STREAMS_* set api.StreamLimits; unset they
// are zero (api.New's defaults); out of range they stop the start naming
// the variable.
func TestLoadConfigStreams(t *testing.T) {
	c, err := LoadConfig(env(map[string]string{"DPCS_STREAMS_PER_SESSION": "2", "DPCS_STREAMS_PER_MEMBER": "4", "DPCS_STREAMS_MAX": "100"}))
	if want := (api.StreamLimits{PerSession: 2, PerMember: 4, Total: 100}); err != nil || c.Streams != want {
		t.Errorf("streams %+v, %v; want %+v", c.Streams, err, want)
	}
	if c, err := LoadConfig(env(nil)); err != nil || c.Streams != (api.StreamLimits{}) {
		t.Errorf("unset: %+v, %v", c.Streams, err)
	}
	_, err = LoadConfig(env(map[string]string{"DPCS_STREAMS_PER_SESSION": "0", "DPCS_STREAMS_PER_MEMBER": "1001", "DPCS_STREAMS_MAX": "lots"}))
	for _, v := range []string{"DPCS_STREAMS_PER_SESSION", "DPCS_STREAMS_PER_MEMBER", "DPCS_STREAMS_MAX"} {
		if err == nil || !strings.Contains(err.Error(), v) {
			t.Errorf("error %v does not name %s", err, v)
		}
	}
}
