package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/service/api/backoffice"
)

// textRoute is a route storing free text, with the body that carries v in
// the field at loc.
type textRoute struct {
	name, method, path string
	who                int64
	body               func(v string) any
	loc                string
	multiline          bool // the field may hold line feeds
}

// textRoutes are the routes that store text written by people; a data
// request of childA is pending for the approve and decline routes.
func textRoutes(f *apiFixture) []textRoute {
	f.t.Helper()
	var req DataRequestView
	f.call(http.MethodPost, "/families/100/data-requests", f.token(childA), map[string]any{"amountBytes": 1}, http.StatusCreated, &req)
	answer := fmt.Sprintf("/families/100/data-requests/%d/", req.ID)
	n := 0
	template := func(field string) func(string) any {
		return func(v string) any {
			n++ // template names are unique
			b := map[string]any{"name": fmt.Sprint("t", n), "type": "LIMIT", "description": "d", "defaultRules": map[string]string{}, "active": true}
			b[field] = v
			return b
		}
	}
	return []textRoute{
		{"member name", http.MethodPost, "/families/100/members", ownerA,
			func(v string) any { return map[string]any{"name": v} }, "body.name", false},
		{"family name", http.MethodPost, "/admin/families", adminID,
			func(v string) any { return map[string]any{"name": v, "planBytes": 1} }, "body.name", false},
		{"template name", http.MethodPost, "/admin/policy-templates", adminID, template("name"), "body.name", false},
		{"template type", http.MethodPost, "/admin/policy-templates", adminID, template("type"), "body.type", false},
		{"template description", http.MethodPost, "/admin/policy-templates", adminID, template("description"), "body.description", true},
		{"data-request message", http.MethodPost, "/families/100/data-requests", childA,
			func(v string) any { return map[string]any{"amountBytes": 1, "message": v} }, "body.message", true},
		{"approval reason", http.MethodPost, answer + "approve", ownerA,
			func(v string) any { return map[string]any{"grant": "DAY", "reason": v} }, "body.reason", true},
		{"decline reason", http.MethodPost, answer + "decline", ownerA,
			func(v string) any { return map[string]any{"reason": v} }, "body.reason", true},
	}
}

// TestTextRefusesInvisible: every route storing text written by people
// refuses control, format and other invisible characters with 422 naming
// the field and the character, and stores nothing.
func TestTextRefusesInvisible(t *testing.T) {
	f := newAPIFixture(t)
	bad := map[string]string{
		"NUL":                               "a\u0000b",
		"right-to-left override":            "gpj.\u202Eexe",
		"zero-width space":                  "a\u200Bb",
		"zero-width joiner between letters": "a\u200Db",
		"byte order mark":                   "\uFEFFa",
		"Hangul filler":                     "\u3164",
		"line separator":                    "a\u2028b",
		"tab":                               "a\tb",
		"carriage return":                   "a\rb",
		"escape":                            "a\u001B[31mb",
		"private use":                       "a\uE000",
	}
	for _, r := range textRoutes(f) {
		if !r.multiline {
			bad["line feed"] = "a\nb"
		}
		for what, v := range bad {
			resp, data := f.do(r.method, r.path, f.token(r.who), r.body(v))
			var p problemBody
			_ = json.Unmarshal(data, &p) // checked below
			if resp.StatusCode != http.StatusUnprocessableEntity || len(p.Errors) != 1 || p.Errors[0].Location != r.loc ||
				!strings.Contains(p.Errors[0].Message, "U+") {
				t.Errorf("%s with %s: %d %s; want 422 at %s naming the character", r.name, what, resp.StatusCode, data, r.loc)
			}
		}
		delete(bad, "line feed")
	}
	var members MemberList
	f.call(http.MethodGet, "/families/100/members", f.token(ownerA), nil, http.StatusOK, &members)
	if len(members.Members) != 3 {
		t.Errorf("a refused member was added: %+v", members.Members)
	}
}

// TestTextNormalised: text is stored in Unicode NFC, so one name has one
// spelling whatever the keyboard sent; emoji sequences joined by U+200D and,
// where the field takes several lines, line feeds are kept.
func TestTextNormalised(t *testing.T) {
	f := newAPIFixture(t)
	owner, admin := f.token(ownerA), f.token(adminID)

	var m MemberView
	f.call(http.MethodPost, "/families/100/members", owner, map[string]any{"name": "Jose\u0301 \u1100\u1161"}, http.StatusCreated, &m)
	if want := "Jos\u00e9 \uac00"; m.Name != want {
		t.Errorf("member name %q (%U), want NFC %q", m.Name, []rune(m.Name), want)
	}
	var fam backoffice.FamilyView
	family := "김씨 가족 \U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 \u2764\uFE0F"
	f.call(http.MethodPost, "/admin/families", admin, map[string]any{"name": family, "planBytes": 1}, http.StatusCreated, &fam)
	if fam.Name != family {
		t.Errorf("family name %q, want %q kept", fam.Name, family)
	}
	var req DataRequestView
	f.call(http.MethodPost, "/families/100/data-requests", f.token(childA),
		map[string]any{"amountBytes": 1, "message": "숙제\n자료 cafe\u0301"}, http.StatusCreated, &req)
	if want := "숙제\n자료 caf\u00e9"; req.Message != want {
		t.Errorf("message %q, want %q", req.Message, want)
	}
	var members MemberList
	f.call(http.MethodGet, "/families/100/members", owner, nil, http.StatusOK, &members)
	var names []string
	for _, m := range members.Members {
		names = append(names, m.Name)
	}
	if diff := cmp.Diff([]string{"m1001", "m1002", "m1003", "Jos\u00e9 \uac00"}, names); diff != "" {
		t.Errorf("stored names (-want +got):\n%s", diff)
	}
}
