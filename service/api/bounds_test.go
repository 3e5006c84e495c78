package api

import (
	"testing"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// The API takes ids with the one set of bounds the judge and the SQL
// columns hold (doc/architecture.md, "Whatever a judge accepts, the truth
// can store"): every appId, in a body, a path or a query, is at most
// policy.MaxAppIDLen long and every eventId at most quota.MaxEventIDLen, in
// the OpenAPI document the routes validate against. (Those are bytes and
// OpenAPI counts characters: a longer id of multi-byte characters is
// refused by the judge with a 422 naming the field.)
func TestIDBoundsAreTheJudges(t *testing.T) {
	f := newAPIFixture(t)
	want := map[string]int{"appId": policy.MaxAppIDLen, "eventId": quota.MaxEventIDLen}
	seen := map[string]int{}
	check := func(where, name string, s *huma.Schema) {
		bound, ok := want[name]
		if !ok || s == nil || s.Type != "string" {
			return
		}
		seen[name]++
		if s.MaxLength == nil || *s.MaxLength != bound {
			got := "none"
			if s.MaxLength != nil {
				got = itoa(int64(*s.MaxLength))
			}
			t.Errorf("%s: %s has maxLength %s, want %d", where, name, got, bound)
		}
	}
	reg := f.api.OpenAPI().Components.Schemas
	// Every schema a request body reaches: its properties, array items and
	// $refs (answers carry ids the API wrote itself).
	var walk func(where string, s *huma.Schema, seenRefs map[string]bool)
	walk = func(where string, s *huma.Schema, seenRefs map[string]bool) {
		if s == nil {
			return
		}
		if s.Ref != "" {
			if seenRefs[s.Ref] {
				return
			}
			seenRefs[s.Ref] = true
			walk(where, reg.SchemaFromRef(s.Ref), seenRefs)
			return
		}
		for prop, ps := range s.Properties {
			check(where, prop, ps)
			walk(where, ps, seenRefs)
		}
		walk(where, s.Items, seenRefs)
	}
	eachOperation(f, func(method, path string, op *huma.Operation) {
		for _, p := range op.Parameters {
			check(method+" "+path, p.Name, p.Schema)
		}
		if op.RequestBody != nil {
			for _, mt := range op.RequestBody.Content {
				walk(method+" "+path, mt.Schema, map[string]bool{})
			}
		}
	})
	for _, name := range []string{"appId", "eventId"} {
		if seen[name] == 0 {
			t.Errorf("no %s in the OpenAPI document: the walk checked nothing", name)
		}
	}
}
