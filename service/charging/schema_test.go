package charging_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"gopkg.in/yaml.v3"
)

var update = flag.Bool("update", false, "rewrite the golden files (and, with DPCS_NCHF_SPEC_DIR, the schema bundle)")

// schemaBundle holds the Nchf_ConvergedCharging schemas the golden files are
// checked against: every schema reachable from the roots below, bundled
// from 3GPP's OpenAPI files (testdata/README.md says where from).
const schemaBundle = "testdata/nchf-schemas.json"

const specFile = "TS32291_Nchf_ConvergedCharging.yaml"

var schemaRoots = []struct{ file, name string }{
	{specFile, "ChargingDataRequest"}, {specFile, "ChargingDataResponse"},
	{specFile, "ChargingNotifyRequest"}, {specFile, "ChargingNotifyResponse"},
	{"TS29571_CommonData.yaml", "ProblemDetails"},
}

// bundle reads the schemas reachable from schemaRoots out of the 3GPP
// OpenAPI files in dir and writes them as one self-contained OpenAPI
// document, one schema a line. A schema of TS 32.291 keeps its name; one of
// another file is named <TS number>_<name> (TS29571_Uint64). Descriptions
// are dropped. Comment lines are dropped before parsing: some of these
// files indent comments with tabs, which YAML does not allow.
func bundle(dir string) ([]byte, error) {
	docs := map[string]map[string]any{}
	load := func(file string) (map[string]any, error) {
		if d, ok := docs[file]; ok {
			return d, nil
		}
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return nil, err
		}
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(strings.TrimLeft(l, " \t"), "#") {
				lines = append(lines, l)
			}
		}
		var d map[string]any
		if err := yaml.Unmarshal([]byte(strings.Join(lines, "\n")), &d); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		docs[file] = d
		return d, nil
	}
	type key struct{ file, name string }
	nameOf := func(k key) string {
		if k.file == specFile {
			return k.name
		}
		ts, _, _ := strings.Cut(k.file, "_")
		return ts + "_" + k.name
	}
	var queue []key
	seen := map[key]bool{}
	want := func(k key) string {
		if !seen[k] {
			seen[k] = true
			queue = append(queue, k)
		}
		return "#/components/schemas/" + nameOf(k)
	}
	var walk func(file string, v any) (any, error)
	walk = func(file string, v any) (any, error) {
		switch x := v.(type) {
		case map[string]any:
			out := map[string]any{}
			for k, e := range x {
				if ref, ok := e.(string); ok && k == "$ref" {
					f, frag, _ := strings.Cut(ref, "#")
					if f == "" {
						f = file
					}
					name, ok := strings.CutPrefix(frag, "/components/schemas/")
					if !ok {
						return nil, fmt.Errorf("%s: reference %q is not to a schema", file, ref)
					}
					out[k] = want(key{f, name})
					continue
				}
				if _, ok := e.(string); ok && k == "description" {
					continue
				}
				w, err := walk(file, e)
				if err != nil {
					return nil, err
				}
				out[k] = w
			}
			return out, nil
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				w, err := walk(file, e)
				if err != nil {
					return nil, err
				}
				out[i] = w
			}
			return out, nil
		}
		return v, nil
	}
	for _, r := range schemaRoots {
		want(key{r.file, r.name})
	}
	schemas := map[string]any{}
	for len(queue) > 0 {
		k := queue[0]
		queue = queue[1:]
		d, err := load(k.file)
		if err != nil {
			return nil, err
		}
		comps, _ := d["components"].(map[string]any)
		all, _ := comps["schemas"].(map[string]any)
		s, ok := all[k.name]
		if !ok {
			return nil, fmt.Errorf("%s: no schema %s", k.file, k.name)
		}
		if schemas[nameOf(k)], err = walk(k.file, s); err != nil {
			return nil, err
		}
	}
	var b bytes.Buffer
	b.WriteString(`{"openapi":"3.0.0","info":{"title":"Nchf_ConvergedCharging schemas, bundled","version":"3.2.0-alpha.4",` +
		`"description":"© 2023, 3GPP Organizational Partners (ARIB, ATIS, CCSA, ETSI, TSDSI, TTA, TTC). All rights reserved. ` +
		`The schemas of 3GPP TS 32.291 V18.4.0 (and of the TS 29.xxx files it references) reachable from ChargingDataRequest, ` +
		`ChargingDataResponse, ChargingNotifyRequest, ChargingNotifyResponse and ProblemDetails; see testdata/README.md."},` +
		`"paths":{},"components":{"schemas":{`)
	names := make([]string, 0, len(schemas))
	for n := range schemas {
		names = append(names, n)
	}
	slices.Sort(names)
	for i, n := range names {
		line, err := json.Marshal(map[string]any{n: schemas[n]})
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n")
		b.Write(line[1 : len(line)-1])
	}
	b.WriteString("\n}}}\n")
	return b.Bytes(), nil
}

// TestSchemaBundle checks testdata/nchf-schemas.json against 3GPP's files
// when DPCS_NCHF_SPEC_DIR names a directory holding them (a checkout of
// github.com/jdegre/5GC_APIs); with -update it rewrites the bundle.
func TestSchemaBundle(t *testing.T) {
	dir := os.Getenv("DPCS_NCHF_SPEC_DIR")
	if dir == "" {
		t.Skip("DPCS_NCHF_SPEC_DIR is not set: the bundle is not compared with the 3GPP files")
	}
	got, err := bundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(schemaBundle, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(schemaBundle)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s differs from the schemas bundled from %s: run with -update", schemaBundle, dir)
	}
}

// schemas loads the bundle.
func schemas(tb testing.TB) *openapi3.T {
	tb.Helper()
	b, err := os.ReadFile(schemaBundle)
	if err != nil {
		tb.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		tb.Fatal(err)
	}
	if err := doc.Components.Validate(tb.Context()); err != nil {
		tb.Fatal(err)
	}
	return doc
}

// validate checks the JSON document b against the bundle's schema name.
func validate(tb testing.TB, doc *openapi3.T, name string, b []byte) error {
	tb.Helper()
	ref := doc.Components.Schemas[name]
	if ref == nil || ref.Value == nil {
		tb.Fatalf("no schema %s in the bundle", name)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	return ref.Value.VisitJSON(v, openapi3.EnableFormatValidation(), openapi3.MultiErrors())
}

// goldenSchema is the schema a golden file's name says it holds.
func goldenSchema(file string) string {
	switch base := filepath.Base(file); {
	case strings.HasPrefix(base, "request-"):
		return "ChargingDataRequest"
	case strings.HasPrefix(base, "response-"):
		return "ChargingDataResponse"
	case strings.HasPrefix(base, "notify-"):
		return "ChargingNotifyRequest"
	case strings.HasPrefix(base, "problem-"):
		return "TS29571_ProblemDetails"
	}
	return ""
}

// Every golden file is valid against the 3GPP schema of what it holds.
func TestGoldenFilesMatchTheSchema(t *testing.T) {
	doc := schemas(t)
	files, err := filepath.Glob("testdata/golden/*.json")
	if err != nil || len(files) < 8 {
		t.Fatalf("golden files: %v (%d)", err, len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			name := goldenSchema(f)
			if name == "" {
				t.Fatalf("%s: name it request-, response-, notify- or problem-", f)
			}
			if err := validate(t, doc, name, b); err != nil {
				t.Errorf("%s is not a valid %s: %v", f, name, err)
			}
		})
	}
}

// The check can fail: documents that break the schema are refused.
func TestSchemaRefusesWhatTheSpecRefuses(t *testing.T) {
	doc := schemas(t)
	for name, bad := range map[string]string{
		"negative volume": `{"invocationTimeStamp":"2026-11-27T10:00:00Z","invocationSequenceNumber":1,"nfConsumerIdentification":{"nodeFunctionality":"SMF"},"multipleUnitUsage":[{"ratingGroup":10,"requestedUnit":{"totalVolume":-1}}]}`,
		"no sequence":     `{"invocationTimeStamp":"2026-11-27T10:00:00Z","nfConsumerIdentification":{"nodeFunctionality":"SMF"}}`,
		"bad time":        `{"invocationTimeStamp":"yesterday","invocationSequenceNumber":1,"nfConsumerIdentification":{"nodeFunctionality":"SMF"}}`,
		"rg over uint32":  `{"invocationTimeStamp":"2026-11-27T10:00:00Z","invocationSequenceNumber":1,"nfConsumerIdentification":{"nodeFunctionality":"SMF"},"multipleUnitUsage":[{"ratingGroup":4294967296}]}`,
	} {
		if err := validate(t, doc, "ChargingDataRequest", []byte(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := validate(t, doc, "ChargingDataResponse", []byte(`{"invocationSequenceNumber":1}`)); err == nil {
		t.Error("a response without invocationTimeStamp: accepted")
	}
}
