package doccheck

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const module = "github.com/dabom/dpcs"

// docs are the documents checked, relative to the module's root.
func docs(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "doc", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append(files, filepath.Join(root, "README.md"))
}

// pkgInfo is one module package: its import path relative to the module
// and its exported identifiers.
type pkgInfo struct {
	rel string
	dir string
	// top are the exported top-level names; members the exported methods,
	// fields and interface methods by type, with the types embedded in each.
	top      map[string]bool
	members  map[string]map[string]bool
	embedded map[string][]string
}

// modulePackages lists the module's non-main packages by name (go list).
func modulePackages(t *testing.T) (root string, byName map[string][]*pkgInfo) {
	t.Helper()
	out, err := exec.Command("go", "list", "-e", "-f", "{{.ImportPath}}\t{{.Name}}\t{{.Dir}}\t{{.Module.Dir}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	byName = map[string][]*pkgInfo{}
	for line := range bytes.Lines(bytes.TrimSpace(out)) {
		f := strings.Split(strings.TrimSpace(string(line)), "\t")
		if len(f) != 4 || f[1] == "main" || f[1] == "" {
			continue
		}
		root = f[3]
		rel := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		byName[f[1]] = append(byName[f[1]], &pkgInfo{rel: rel, dir: f[2]})
	}
	return root, byName
}

// load parses p's Go files (every build tag) for its exported identifiers:
// of its test files, the Test, Benchmark, Fuzz and Example functions that
// documents name.
func (p *pkgInfo) load(t *testing.T) {
	if p.top != nil {
		return
	}
	p.top, p.members, p.embedded = map[string]bool{}, map[string]map[string]bool{}, map[string][]string{}
	files, err := filepath.Glob(filepath.Join(p.dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	member := func(typ, name string) {
		if p.members[typ] == nil {
			p.members[typ] = map[string]bool{}
		}
		p.members[typ][name] = true
	}
	for _, file := range files {
		test := strings.HasSuffix(file, "_test.go")
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && test {
				if fn.Recv == nil && testFunc.MatchString(fn.Name.Name) {
					p.top[fn.Name.Name] = true
				}
				continue
			} else if test {
				continue
			}
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					p.top[d.Name.Name] = true
					continue
				}
				member(recvName(d.Recv.List[0].Type), d.Name.Name)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							p.top[n.Name] = true
						}
					case *ast.TypeSpec:
						p.top[s.Name.Name] = true
						p.typeMembers(s.Name.Name, s.Type, member)
					}
				}
			}
		}
	}
}

// typeMembers records the fields of a struct type and the methods of an
// interface type, and the types either embeds.
func (p *pkgInfo) typeMembers(typ string, expr ast.Expr, member func(typ, name string)) {
	var fields *ast.FieldList
	switch e := expr.(type) {
	case *ast.StructType:
		fields = e.Fields
	case *ast.InterfaceType:
		fields = e.Methods
	default:
		return
	}
	for _, f := range fields.List {
		if len(f.Names) == 0 {
			p.embedded[typ] = append(p.embedded[typ], recvName(f.Type))
			continue
		}
		for _, n := range f.Names {
			member(typ, n.Name)
		}
	}
}

// recvName is the type name of a receiver or an embedded field.
func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.IndexListExpr:
		return recvName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// has reports whether typ (or a type it embeds) has member.
func (p *pkgInfo) has(typ, member string, seen map[string]bool) bool {
	if p.members[typ][member] {
		return true
	}
	if seen[typ] {
		return false
	}
	seen[typ] = true
	for _, e := range p.embedded[typ] {
		if p.has(e, member, seen) {
			return true
		}
	}
	return false
}

// testFunc matches the functions go test runs.
var testFunc = regexp.MustCompile(`^(Test|Benchmark|Fuzz|Example)`)

// named matches a backquoted span that starts with pkg.Name,
// pkg.Type.Member or path/pkg.Name.
var named = regexp.MustCompile("`((?:[a-z][a-z0-9]*/)*[a-z][a-z0-9]*)\\.([A-Z][A-Za-z0-9_]*)(?:\\.([A-Z][A-Za-z0-9_]*))?[^`]*`")

// TestDocsNameIdentifiersThatExist: every pkg.Name a document names in
// backquotes, where pkg is one of the module's packages (by name, or by
// the end of its path), exists there.
func TestDocsNameIdentifiersThatExist(t *testing.T) {
	root, byName := modulePackages(t)
	checked := 0
	for _, doc := range docs(t, root) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, doc)
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range named.FindAllStringSubmatch(line, -1) {
				path, ident, sub := m[1], m[2], m[3]
				pkgName := path[strings.LastIndex(path, "/")+1:]
				var cands []*pkgInfo
				for _, p := range byName[pkgName] {
					if path == pkgName || p.rel == path || strings.HasSuffix(p.rel, "/"+path) {
						cands = append(cands, p)
					}
				}
				if len(cands) == 0 {
					continue // not the module's: the standard library's or a dependency's
				}
				checked++
				ok := false
				for _, p := range cands {
					p.load(t)
					if p.top[ident] && (sub == "" || p.has(ident, sub, map[string]bool{})) {
						ok = true
					}
				}
				if !ok {
					what := path + "." + ident
					if sub != "" {
						what += "." + sub
					}
					t.Errorf("%s:%d names %s, which %s does not have", name, i+1, what, cands[0].rel)
				}
			}
		}
	}
	if checked < 100 {
		t.Errorf("only %d identifiers checked: is the pattern still right?", checked)
	}
}
