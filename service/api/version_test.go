package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestVersionRoute(t *testing.T) {
	f := newAPIFixture(t)
	release := VersionInfo{Version: "v0.1.0", Commit: "0123456789abcdef0123456789abcdef01234567",
		CommitTime: "2026-11-24T09:00:00Z", GoVersion: "go1.26.8"}
	cfg := Config{Store: f.store, State: f.qs, Hub: f.hub, Inbox: f.inbox, Secret: make([]byte, 32), Build: release}
	f.complete(&cfg)
	custom, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// This test binary carries neither a version nor a commit (CI also builds
	// with -buildvcs=false): the default answers devel and unknown.
	def := BuildVersion()
	if def.Version == "" || def.Commit == "" || def.CommitTime == "" || def.GoVersion == "" {
		t.Fatalf("BuildVersion() = %+v: every field must be set", def)
	}
	tests := []struct {
		name string
		h    http.Handler
		want map[string]any
	}{
		{"default: the binary's build", f.api.Handler(), map[string]any{"version": def.Version, "commit": def.Commit,
			"commitTime": def.CommitTime, "modified": def.Modified, "goVersion": def.GoVersion}},
		{"Config.Build", custom.Handler(), map[string]any{"version": "v0.1.0", "commit": "0123456789abcdef0123456789abcdef01234567",
			"commitTime": "2026-11-24T09:00:00Z", "modified": false, "goVersion": "go1.26.8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.h)
			defer srv.Close()
			resp, err := http.Get(srv.URL + "/version") // no token: public
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /version: %d", resp.StatusCode)
			}
			var got map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("GET /version (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVersionRouteDocumented(t *testing.T) {
	f := newAPIFixture(t)
	var doc struct {
		Tags  []struct{ Name, Description string } `json:"tags"`
		Paths map[string]map[string]struct {
			OperationID string                 `json:"operationId"`
			Tags        []string               `json:"tags"`
			Security    *[]map[string][]string `json:"security"`
			Responses   map[string]struct {
				Content map[string]struct {
					Schema struct {
						Ref string `json:"$ref"`
					} `json:"schema"`
				} `json:"content"`
			} `json:"responses"`
		} `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Required   []string                  `json:"required"`
				Properties map[string]map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	f.call(http.MethodGet, "/openapi.json", "", nil, http.StatusOK, &doc)
	op, ok := doc.Paths["/version"]["get"]
	if !ok {
		t.Fatalf("openapi.json has no GET /version: %v", doc.Paths["/version"])
	}
	if op.OperationID != "get-version" || len(op.Tags) != 1 || op.Tags[0] != systemTag {
		t.Errorf("operation %q tags %v", op.OperationID, op.Tags)
	}
	if op.Security == nil || len(*op.Security) != 0 {
		t.Errorf("security %v, want [] (public)", op.Security)
	}
	tagged := false
	for _, tg := range doc.Tags {
		tagged = tagged || tg.Name == systemTag && tg.Description != ""
	}
	if !tagged {
		t.Errorf("tag %q not declared with a description: %+v", systemTag, doc.Tags)
	}
	if ref := op.Responses["200"].Content["application/json"].Schema.Ref; ref != "#/components/schemas/VersionInfo" {
		t.Fatalf("200 schema %q", ref)
	}
	s := doc.Components.Schemas["VersionInfo"]
	fields := []string{"version", "commit", "commitTime", "modified", "goVersion"}
	if diff := cmp.Diff(fields, s.Required); diff != "" {
		t.Errorf("required (-want +got):\n%s", diff)
	}
	for _, k := range fields {
		if s.Properties[k]["description"] == nil {
			t.Errorf("property %s has no description: %v", k, s.Properties[k])
		}
	}
}
