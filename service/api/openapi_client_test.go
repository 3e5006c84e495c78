package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	// The client oapi-codegen generates imports its runtime; this keeps the
	// module in go.mod (and go.sum) for TestGeneratedClient.
	_ "github.com/oapi-codegen/runtime"
)

// TestGeneratedClient generates a Go client from the served /openapi.json
// with oapi-codegen (the version go.mod's tool directive pins), compiles it
// with testdata/genclient/driver.go and runs a login → dashboard → PATCH
// policies → 409 (stale expectedVersion) round trip with it against the API.
func TestGeneratedClient(t *testing.T) {
	if testing.Short() {
		t.Skip("generates and compiles a client: several seconds")
	}
	f := newAPIFixture(t)
	resp, spec := f.do(http.MethodGet, "/openapi.json", "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/openapi.json: %d", resp.StatusCode)
	}

	// Inside the module, so the generated code builds with go.mod's
	// versions; the leading _ keeps ./... patterns away from it.
	dir, err := os.MkdirTemp(".", "_genclient")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	driver, err := os.ReadFile(filepath.Join("testdata", "genclient", "driver.go"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"openapi.json": spec, "driver.go": driver} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	goCmd := func(args ...string) []byte {
		t.Helper()
		cmd := exec.CommandContext(ctx, "go", args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
		}
		return out
	}
	goCmd("tool", "oapi-codegen", "-generate", "types,client", "-package", "main",
		"-o", filepath.Join(dir, "client.go"), filepath.Join(dir, "openapi.json"))
	bin := filepath.Join(t.TempDir(), "driver")
	goCmd("build", "-o", bin, "./"+filepath.ToSlash(dir))

	// A policy at version 1, so the driver's expectedVersion is a real one
	// (0 would mean last write wins).
	f.call(http.MethodPatch, fmt.Sprintf("/families/%d/members/%d/policies", famA, childA), f.token(ownerA),
		map[string]any{"set": map[string]string{"LIMIT:DATA:MONTHLY": "1073741824"}}, http.StatusOK, nil)

	cmd := exec.CommandContext(ctx, bin, "-server", f.srv.URL, "-login", strconv.FormatInt(ownerA, 10),
		"-password", testPassword, "-family", strconv.FormatInt(famA, 10), "-member", strconv.FormatInt(childA, 10))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("driver: %v\n%s", err, stderr.Bytes())
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("driver printed %q: %v", out, err)
	}
	want := map[string]any{"role": "OWNER", "familyId": float64(famA), "members": float64(3), "poolTotal": float64(10 * gib),
		"versionBefore": float64(1), "versionAfter": float64(2), "limit": "524288000",
		"conflictStatus": float64(http.StatusConflict), "conflictAt": "body.expectedVersion"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip through the generated client (-want +got):\n%s", diff)
	}
}

// TestOpenAPIContract checks what client generators and linters rely on:
// schema names chosen in Go (no names huma derives from operation ids, which
// collide with generated wrappers), every operation described and tagged
// with a declared tag, a server, and public routes marked `security: []`.
func TestOpenAPIContract(t *testing.T) {
	f := newAPIFixture(t)
	_, data := f.do(http.MethodGet, "/openapi.json", "", nil)
	// scripts/openapi-lint.sh lints the document this writes.
	if out := os.Getenv("DPCS_TEST_OPENAPI_OUT"); out != "" {
		if err := os.WriteFile(out, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var doc struct {
		Servers []struct {
			URL string `json:"url"`
		} `json:"servers"`
		Tags []struct {
			Name        string `json:"name"`
			Description string `json:"description"`
		} `json:"tags"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != "/" {
		t.Errorf("servers %+v, want one: /", doc.Servers)
	}
	tags := map[string]bool{}
	for _, tg := range doc.Tags {
		if tg.Description == "" {
			t.Errorf("tag %s has no description", tg.Name)
		}
		tags[tg.Name] = true
	}
	ident := regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	derived := regexp.MustCompile(`(Request|Response|InputBody|OutputBody)$`)
	for name := range doc.Components.Schemas {
		if !ident.MatchString(name) || derived.MatchString(name) {
			t.Errorf("schema %q: name response and request bodies with Go types", name)
		}
	}
	var public []string
	for path, ops := range doc.Paths {
		for method, raw := range ops {
			var op struct {
				OperationID string                 `json:"operationId"`
				Description string                 `json:"description"`
				Tags        []string               `json:"tags"`
				Security    *[]map[string][]string `json:"security"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			switch {
			case op.Description == "":
				t.Errorf("%s %s: no description", method, path)
			case len(op.Tags) != 1 || !tags[op.Tags[0]]:
				t.Errorf("%s %s: tags %v, want one declared tag", method, path, op.Tags)
			case op.Security == nil:
				t.Errorf("%s %s: no security (public routes declare security: [])", method, path)
			case len(*op.Security) == 0:
				public = append(public, op.OperationID)
			}
		}
	}
	slices.Sort(public)
	want := []string{"get-vapid-public-key", "get-version", "login", "logout", "refresh"}
	if diff := cmp.Diff(want, public); diff != "" {
		t.Errorf("public operations (-want +got):\n%s", diff)
	}
	if !bytes.Contains(data, []byte(`"security":[]`)) {
		t.Error(`public operations do not serialise as "security":[]`)
	}
}
