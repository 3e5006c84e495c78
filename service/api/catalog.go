package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// CatalogApp is one app of the catalog with its category.
type CatalogApp struct {
	ID       string `json:"id" doc:"App id, the <appId> of BLOCK:APP:<appId>" example:"com.youtube.app"`
	Category string `json:"category" doc:"The app's category, the <category> of BLOCK:CATEGORY:<category>" example:"VIDEO"`
	Name     string `json:"name" doc:"The app's name in Korean, shown to people instead of its id" example:"유튜브"`
	NameEn   string `json:"nameEn" doc:"The app's name in English" example:"YouTube"`
	Icon     string `json:"icon" doc:"An emoji shown beside the name" example:"▶️"`
}

// Catalog is what GET /catalog answers: the app categories and the apps the
// system knows, the choices a client offers for app and category blocks.
type Catalog struct {
	Categories  []string     `json:"categories" doc:"Every category, in a stable order" example:"[\"VIDEO\",\"GAME\"]"`
	Apps        []CatalogApp `json:"apps" doc:"Every known app with its category"`
	TopUpOffers []TopUpOffer `json:"topUpOffers" doc:"The top-ups offered, smallest first, with their prices (the operator's DPCS_TOPUP_OFFERS)"`
	// GiftRules are the rules every gift keeps (nil in DefaultCatalog).
	GiftRules *GiftRulesView `json:"giftRules,omitempty" doc:"The rules every gift keeps (the operator's DPCS_GIFT_*)"`
}

// UnknownApps are the apps in recent traffic the catalog does not name.
type UnknownApps struct {
	Records int          `json:"records" doc:"How many of the newest usage records were read"`
	Apps    []UnknownApp `json:"apps"`
}

// UnknownApp is an app seen in traffic and not in the catalog.
type UnknownApp struct {
	ID       string    `json:"id" doc:"The app id the network reported" example:"com.zepeto.global"`
	Events   int64     `json:"events" doc:"Usage events of it among the records read"`
	Bytes    int64     `json:"bytes" doc:"Bytes used by it among the records read"`
	Families int64     `json:"families" doc:"How many families used it"`
	LastSeen time.Time `json:"lastSeen" doc:"Its latest usage event's time"`
}

// TopUpOffer is a top-up a carrier sells: an amount and its price, billed
// to the phone bill.
type TopUpOffer struct {
	ID       string `json:"id" doc:"The offer's id, what POST …/topups names (offerId): its amount, e.g. 500MB or 1GB" example:"1GB"`
	Bytes    int64  `json:"bytes" doc:"The amount added to the family pool" example:"1073741824"`
	PriceKRW int64  `json:"priceKrw" doc:"Its price in won, VAT included (0: free)" example:"9900"`
	VATKRW   int64  `json:"vatKrw" doc:"The VAT in the price, at the operator's rate (DPCS_VAT_RATE)" example:"900"`
}

// offerID is the id of an offer of bytes: its amount in GB when whole,
// else in MB (ParseTopUpOffers takes only whole MB).
func offerID(bytes int64) string {
	if bytes%(1<<30) == 0 {
		return strconv.FormatInt(bytes>>30, 10) + "GB"
	}
	return strconv.FormatInt(bytes>>20, 10) + "MB"
}

// DefaultTopUpOffers are the top-ups offered when the operator names none:
// 100 MB for 2,200 won, 500 MB 5,500, 1 GB 9,900, 3 GB 19,800 (VAT
// included; VATKRW is filled in by the server at its rate).
func DefaultTopUpOffers() []TopUpOffer {
	out := []TopUpOffer{{Bytes: 100 << 20, PriceKRW: 2200}, {Bytes: 500 << 20, PriceKRW: 5500}, {Bytes: 1 << 30, PriceKRW: 9900},
		{Bytes: 3 << 30, PriceKRW: 19800}}
	for i := range out {
		out[i].ID = offerID(out[i].Bytes)
	}
	return out
}

// MaxTopUpOffers is how many top-ups ParseTopUpOffers accepts.
const MaxTopUpOffers = 8

// ParseTopUpOffers reads offers written "100MB=2200,1GB=9900": an amount in
// MB or GB (binary units, whole numbers) and its price in won, VAT
// included, at most MaxTopUpOffers, each amount once; they are returned
// smallest first, each with its id (its amount: 1024MB is 1GB). "" is none
// (the app then offers no top-up buttons, and owners cannot top up).
func ParseTopUpOffers(s string) ([]TopUpOffer, error) {
	out := []TopUpOffer{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, item := range strings.Split(s, ",") {
		amount, price, ok := strings.Cut(strings.TrimSpace(item), "=")
		unit := int64(0)
		switch {
		case strings.HasSuffix(amount, "MB"):
			unit, amount = 1<<20, strings.TrimSuffix(amount, "MB")
		case strings.HasSuffix(amount, "GB"):
			unit, amount = 1<<30, strings.TrimSuffix(amount, "GB")
		}
		n, err1 := strconv.ParseInt(amount, 10, 64)
		won, err2 := strconv.ParseInt(price, 10, 64)
		if !ok || unit == 0 || err1 != nil || err2 != nil || n < 1 || n > policy.MaxBytes/unit || won < 0 || won > 100_000_000 {
			return nil, fmt.Errorf("%q: want <amount>MB=<won> or <amount>GB=<won>, e.g. 1GB=9900 (amount ≥ 1, price 0 to 100000000)", item)
		}
		o := TopUpOffer{Bytes: n * unit, PriceKRW: won}
		o.ID = offerID(o.Bytes)
		if slices.ContainsFunc(out, func(x TopUpOffer) bool { return x.Bytes == o.Bytes }) {
			return nil, fmt.Errorf("%q: the amount is offered twice", item)
		}
		out = append(out, o)
	}
	if len(out) > MaxTopUpOffers {
		return nil, fmt.Errorf("at most %d offers, got %d", MaxTopUpOffers, len(out))
	}
	slices.SortFunc(out, func(a, b TopUpOffer) int { return cmp.Compare(a.Bytes, b.Bytes) })
	return out, nil
}

// DefaultCatalog is the catalog the processor judges category blocks with
// (policy.DefaultApps), in its order, with the categories in order of first
// appearance and each app's name and icon (policy.DefaultAppLabels).
func DefaultCatalog() Catalog {
	apps := policy.DefaultApps()
	labels := policy.DefaultAppLabels()
	c := Catalog{Apps: make([]CatalogApp, 0, len(apps))}
	seen := map[policy.Category]bool{}
	for _, app := range apps {
		if !seen[app.Category] {
			seen[app.Category] = true
			c.Categories = append(c.Categories, string(app.Category))
		}
		l := labels[app.ID]
		if l.Name == "" {
			l = policy.AppLabel{Name: app.ID, NameEn: app.ID}
		}
		c.Apps = append(c.Apps, CatalogApp{ID: app.ID, Category: string(app.Category), Name: l.Name, NameEn: l.NameEn, Icon: l.Icon})
	}
	return c
}

// catalog is GET /catalog's answer now: the six categories, the store's
// apps with their labels, the top-up offers.
func (a *Server) catalog(ctx context.Context) (Catalog, error) {
	apps, err := a.cfg.Store.Apps(ctx)
	if err != nil {
		return Catalog{}, err
	}
	rules := giftRulesView(a.cfg.Family.GiftRules())
	c := Catalog{Apps: make([]CatalogApp, 0, len(apps)), TopUpOffers: a.offers(), GiftRules: &rules}
	c.Categories = DefaultCatalog().Categories
	for _, cat := range policy.Categories() {
		if !slices.Contains(c.Categories, string(cat)) {
			c.Categories = append(c.Categories, string(cat))
		}
	}
	for _, app := range apps {
		en := app.NameEn
		if en == "" {
			en = app.Name
		}
		c.Apps = append(c.Apps, CatalogApp{ID: app.ID, Category: string(app.Category), Name: app.Name, NameEn: en, Icon: app.Icon})
	}
	return c, nil
}

type catalogOutput struct {
	Body Catalog
}

// CatalogAppBody is an app as the back office writes it.
type CatalogAppBody struct {
	Category string `json:"category" enum:"VIDEO,GAME,SOCIAL,MESSAGING,WEB,MUSIC" doc:"The app's category: BLOCK:CATEGORY:<category> blocks it"`
	Name     string `json:"name" minLength:"1" maxLength:"50" doc:"Its name in Korean, shown to people instead of its id"`
	NameEn   string `json:"nameEn,omitempty" maxLength:"50" doc:"Its name in English (absent: name)"`
	Icon     string `json:"icon,omitempty" maxLength:"32" doc:"An emoji shown beside the name"`
}

type catalogAppInput struct {
	AppID string `path:"appId" minLength:"1" maxLength:"189" doc:"The app id, as in BLOCK:APP:<appId>"`
	Body  CatalogAppBody
}

// registerCatalog adds GET /catalog for any authenticated caller (member,
// owner or admin): the choices a client shows for app and category blocks;
// and the back office's edits of it.
func (a *Server) registerCatalog() {
	huma.Register(a.api, huma.Operation{OperationID: "get-catalog", Method: http.MethodGet, Path: "/catalog",
		Summary: "The apps and app categories policies can block",
		Description: "The categories (for BLOCK:CATEGORY:<category>) and the known apps with their category " +
			"(for BLOCK:APP:<appId>), as the processor judges them, and the top-ups offered with their prices. " +
			"The apps are the operator's catalog (PUT and DELETE /admin/catalog/apps/{appId}). Any logged-in caller may read it.",
		Tags: []string{familiesTag}, Security: secured(), Errors: []int{http.StatusUnauthorized, http.StatusServiceUnavailable},
	}, func(ctx context.Context, _ *struct{}) (*catalogOutput, error) {
		if _, ok := principalFrom(ctx); !ok {
			return nil, huma.Error401Unauthorized("not authenticated")
		}
		c, err := a.catalog(ctx)
		if err != nil {
			return nil, a.problem(ctx, err, "")
		}
		return &catalogOutput{Body: c}, nil
	})

	changed := func(ctx context.Context) {
		if a.cfg.OnCatalogChange == nil {
			return
		}
		apps, err := a.cfg.Store.Apps(ctx)
		if err != nil {
			a.log.WarnContext(ctx, "api: read the app catalog after a change", "err", err)
			return
		}
		c := make(policy.Catalog, len(apps))
		for _, app := range apps {
			c[app.ID] = app.Category
		}
		a.cfg.OnCatalogChange(c)
	}
	doc := "The app catalog people see apps by (GET /catalog) and the engine judges category blocks with: " +
		"this process's judges at once, every other process's within DPCS_CATALOG_REFRESH. "
	huma.Register(a.api, huma.Operation{OperationID: "put-catalog-app", Method: http.MethodPut, Path: "/admin/catalog/apps/{appId}",
		Summary: "Add an app to the catalog or change it", Tags: []string{adminTag}, Security: secured(),
		Description: doc + "Adds the app (last) or changes its category, names and icon; a removed app comes back. " +
			"ADMIN only. Audited as catalog.app.put.",
		Errors: []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusUnprocessableEntity},
	}, func(ctx context.Context, in *catalogAppInput) (*struct{ Body CatalogApp }, error) {
		p, err := a.admin(ctx)
		if err != nil {
			return nil, err
		}
		app, err := a.cfg.Store.PutApp(ctx, store.CatalogApp{ID: in.AppID, Category: policy.Category(in.Body.Category),
			Name: in.Body.Name, NameEn: in.Body.NameEn, Icon: in.Body.Icon}, p.actor())
		if err != nil {
			if fe := (*store.FieldError)(nil); errors.As(err, &fe) && fe.Field == "appId" {
				return nil, a.problem(ctx, err, "path")
			}
			return nil, a.problem(ctx, err, "body")
		}
		changed(ctx)
		en := app.NameEn
		if en == "" {
			en = app.Name
		}
		return &struct{ Body CatalogApp }{Body: CatalogApp{ID: app.ID, Category: string(app.Category), Name: app.Name, NameEn: en, Icon: app.Icon}}, nil
	})
	huma.Register(a.api, huma.Operation{OperationID: "list-unknown-apps", Method: http.MethodGet, Path: "/admin/catalog/unknown-apps",
		Summary: "Apps in recent traffic the catalog does not name", Tags: []string{adminTag}, Security: secured(),
		Description: "The apps of the newest usage records (records, default 100000, read newest first: the cost is bounded " +
			"whatever the history's size) that the catalog does not hold, most used first, at most 100: what people would see " +
			"as \"알 수 없는 앱\" until an admin names them (PUT /admin/catalog/apps/{appId}). ADMIN or AGENT.",
		Errors: []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusUnprocessableEntity},
	}, func(ctx context.Context, in *struct {
		Records int `query:"records" minimum:"1" maximum:"1000000" default:"100000" doc:"How many of the newest usage records to read"`
	}) (*struct{ Body UnknownApps }, error) {
		if _, err := a.admin(ctx); err != nil {
			return nil, err
		}
		n := in.Records
		if n == 0 {
			n = 100_000
		}
		seen, err := a.cfg.Store.RecentApps(ctx, n)
		if err != nil {
			return nil, a.problem(ctx, err, "query.records")
		}
		out := UnknownApps{Records: n, Apps: make([]UnknownApp, 0, len(seen))}
		for _, s := range seen {
			out.Apps = append(out.Apps, UnknownApp{ID: s.AppID, Events: s.Events, Bytes: s.Bytes, Families: s.Families, LastSeen: s.LastSeen})
		}
		return &struct{ Body UnknownApps }{Body: out}, nil
	})
	huma.Register(a.api, huma.Operation{OperationID: "delete-catalog-app", Method: http.MethodDelete, Path: "/admin/catalog/apps/{appId}",
		Summary: "Remove an app from the catalog", Tags: []string{adminTag}, Security: secured(), DefaultStatus: http.StatusNoContent,
		Description: doc + "People see the app by its id again and its category no longer names its events' (a block " +
			"of the app itself, BLOCK:APP:<appId>, still holds). ADMIN only. Audited as catalog.app.delete.",
		Errors: []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound},
	}, func(ctx context.Context, in *struct {
		AppID string `path:"appId" minLength:"1" maxLength:"189" doc:"The app id"`
	}) (*struct{}, error) {
		p, err := a.admin(ctx)
		if err != nil {
			return nil, err
		}
		if err := a.cfg.Store.DeleteApp(ctx, in.AppID, p.actor()); err != nil {
			return nil, a.problem(ctx, err, "path.appId")
		}
		changed(ctx)
		return &struct{}{}, nil
	})
}
