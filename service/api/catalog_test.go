package api

import (
	"net/http"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

func TestCatalogRoute(t *testing.T) {
	f := newAPIFixture(t)
	f.call(http.MethodGet, "/catalog", "", nil, http.StatusUnauthorized, nil) // no token
	var got Catalog
	f.call(http.MethodGet, "/catalog", f.token(childA), nil, http.StatusOK, &got) // a MEMBER may read it
	want := DefaultCatalog()
	want.TopUpOffers = DefaultTopUpOffers()
	for i, vat := range []int64{200, 500, 900, 1800} { // 10 % of the price without it
		want.TopUpOffers[i].VATKRW = vat
	}
	rules := giftRulesView(store.DefaultGiftRules())
	want.GiftRules = &rules
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GET /catalog (-want +got):\n%s", diff)
	}
	// Every app is in the catalog the processor judges with, under its category,
	// and every category a constraint may name is offered.
	cat := policy.NewCatalog(policy.DefaultApps())
	if len(got.Apps) != len(cat) {
		t.Errorf("%d apps, want %d", len(got.Apps), len(cat))
	}
	for _, app := range got.Apps {
		if c := cat.Category(app.ID); string(c) != app.Category {
			t.Errorf("app %s: category %q, the processor's %q", app.ID, app.Category, c)
		}
		// People see names, never package ids (#24).
		if app.Name == "" || app.Name == app.ID || app.NameEn == "" || app.NameEn == app.ID || app.Icon == "" {
			t.Errorf("app %s: name %q, English %q, icon %q: want a name people know and an icon", app.ID, app.Name, app.NameEn, app.Icon)
		}
	}
	if got.Apps[0].Name != "유튜브" || got.Apps[0].NameEn != "YouTube" {
		t.Errorf("first app %+v, want 유튜브 / YouTube", got.Apps[0])
	}
	wantCats := []string{"VIDEO", "GAME", "SOCIAL", "MESSAGING", "WEB", "MUSIC"}
	if diff := cmp.Diff(wantCats, got.Categories); diff != "" {
		t.Errorf("categories (-want +got):\n%s", diff)
	}
}

func TestCatalogRouteDocumented(t *testing.T) {
	f := newAPIFixture(t)
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string                 `json:"operationId"`
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
	op, ok := doc.Paths["/catalog"]["get"]
	if !ok {
		t.Fatalf("openapi.json has no GET /catalog: %v", doc.Paths["/catalog"])
	}
	if op.OperationID != "get-catalog" {
		t.Errorf("operationId %q", op.OperationID)
	}
	if op.Security == nil || len(*op.Security) != 1 {
		t.Errorf("security %v, want the bearer token", op.Security)
	}
	ref := op.Responses["200"].Content["application/json"].Schema.Ref
	if ref != "#/components/schemas/Catalog" {
		t.Fatalf("200 schema %q", ref)
	}
	tests := []struct {
		schema   string
		required []string
		props    []string
	}{
		{"Catalog", []string{"categories", "apps", "topUpOffers"}, []string{"apps", "categories", "giftRules", "topUpOffers"}},
		{"TopUpOffer", []string{"id", "bytes", "priceKrw", "vatKrw"}, []string{"bytes", "id", "priceKrw", "vatKrw"}},
		{"CatalogApp", []string{"id", "category", "name", "nameEn", "icon"}, []string{"category", "icon", "id", "name", "nameEn"}},
	}
	for _, tt := range tests {
		s := doc.Components.Schemas[tt.schema]
		var props []string
		for p := range s.Properties {
			props = append(props, p)
		}
		slices.Sort(props)
		req := append([]string(nil), s.Required...)
		slices.Sort(req)
		want := append([]string(nil), tt.required...)
		slices.Sort(want)
		if diff := cmp.Diff(want, req); diff != "" {
			t.Errorf("%s required (-want +got):\n%s", tt.schema, diff)
		}
		if diff := cmp.Diff(tt.props, props); diff != "" {
			t.Errorf("%s properties (-want +got):\n%s", tt.schema, diff)
		}
	}
}

func TestParseTopUpOffers(t *testing.T) {
	got, err := ParseTopUpOffers(" 1GB=9900, 100MB=2200,3GB=0 ")
	want := []TopUpOffer{{ID: "100MB", Bytes: 100 << 20, PriceKRW: 2200}, {ID: "1GB", Bytes: 1 << 30, PriceKRW: 9900}, {ID: "3GB", Bytes: 3 << 30}}
	if err != nil || !cmp.Equal(want, got) {
		t.Errorf("ParseTopUpOffers = %v, %v; want %v", got, err, want)
	}
	if got, err := ParseTopUpOffers(""); err != nil || got == nil || len(got) != 0 {
		t.Errorf("empty: %v %v, want no offers", got, err)
	}
	def, _ := ParseTopUpOffers("100MB=2200,500MB=5500,1GB=9900,3GB=19800")
	if !cmp.Equal(def, DefaultTopUpOffers()) {
		t.Errorf("the documented default %v is not DefaultTopUpOffers %v", def, DefaultTopUpOffers())
	}
	for _, bad := range []string{"1TB=5", "1GB", "GB=5", "0MB=5", "1GB=-1", "1GB=x", "1GB=5,1024MB=6", "1.5GB=5",
		"1MB=1,2MB=1,3MB=1,4MB=1,5MB=1,6MB=1,7MB=1,8MB=1,9MB=1", "99999999GB=1"} {
		if _, err := ParseTopUpOffers(bad); err == nil {
			t.Errorf("ParseTopUpOffers(%q) accepted", bad)
		}
	}
}

// TestCatalogEdits: the back office adds, changes and removes apps; GET
// /catalog follows, and this process's judges are told the new map.
func TestCatalogEdits(t *testing.T) {
	var told []policy.Catalog
	f := newAPIFixture(t, func(c *Config) { c.OnCatalogChange = func(m policy.Catalog) { told = append(told, m) } })
	admin := f.token(adminID)
	var app CatalogApp
	f.call(http.MethodPut, "/admin/catalog/apps/com.zepeto.global", admin, map[string]any{"category": "SOCIAL", "name": "제페토", "icon": "🧍"}, http.StatusOK, &app)
	if app.Name != "제페토" || app.NameEn != "제페토" || app.Category != "SOCIAL" {
		t.Errorf("put: %+v", app)
	}
	f.call(http.MethodDelete, "/admin/catalog/apps/com.tiktok.app", admin, nil, http.StatusNoContent, nil)
	var got Catalog
	f.call(http.MethodGet, "/catalog", f.token(childA), nil, http.StatusOK, &got)
	last := got.Apps[len(got.Apps)-1]
	if last.ID != "com.zepeto.global" || slices.ContainsFunc(got.Apps, func(a CatalogApp) bool { return a.ID == "com.tiktok.app" }) {
		t.Errorf("catalog after the edits: last %+v, %d apps", last, len(got.Apps))
	}
	if len(told) != 2 || told[1]["com.zepeto.global"] != policy.CategorySocial || told[1].Category("com.tiktok.app") != "" {
		t.Errorf("judges told %v", told)
	}
	f.problem(http.MethodPut, "/admin/catalog/apps/a%20b", admin, map[string]any{"category": "GAME", "name": "x"}, http.StatusUnprocessableEntity, "path.appId")
	f.problem(http.MethodPut, "/admin/catalog/apps/x.y", f.token(agentID), map[string]any{"category": "GAME", "name": "x"}, http.StatusForbidden, "")
	f.problem(http.MethodDelete, "/admin/catalog/apps/com.tiktok.app", admin, nil, http.StatusNotFound, "")
}
