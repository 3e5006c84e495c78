package api

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/policy"
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
}

// TopUpOffer is a top-up a carrier sells: an amount and its price.
type TopUpOffer struct {
	Bytes    int64 `json:"bytes" doc:"The amount added to the family pool" example:"1073741824"`
	PriceKRW int64 `json:"priceKrw" doc:"Its price in won (0: free)" example:"9900"`
}

// DefaultTopUpOffers are the top-ups offered when the operator names none:
// 100 MB for 2,200 won, 500 MB 5,500, 1 GB 9,900, 3 GB 19,800.
func DefaultTopUpOffers() []TopUpOffer {
	return []TopUpOffer{{100 << 20, 2200}, {500 << 20, 5500}, {1 << 30, 9900}, {3 << 30, 19800}}
}

// MaxTopUpOffers is how many top-ups ParseTopUpOffers accepts.
const MaxTopUpOffers = 8

// ParseTopUpOffers reads offers written "100MB=2200,1GB=9900": an amount in
// MB or GB (binary units, whole numbers) and its price in won, at most
// MaxTopUpOffers, each amount once; they are returned smallest first. ""
// is none (the app then offers no top-up buttons).
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

type catalogOutput struct {
	Body Catalog
}

// registerCatalog adds GET /catalog for any authenticated caller (member,
// owner or admin): the choices a client shows for app and category blocks.
func (a *Server) registerCatalog() {
	c := DefaultCatalog()
	c.TopUpOffers = slices.Clone(a.cfg.TopUpOffers)
	huma.Register(a.api, huma.Operation{OperationID: "get-catalog", Method: http.MethodGet, Path: "/catalog",
		Summary: "The apps and app categories policies can block",
		Description: "The categories (for BLOCK:CATEGORY:<category>) and the known apps with their category " +
			"(for BLOCK:APP:<appId>), as the processor judges them, and the top-ups offered with their prices. " +
			"Any logged-in caller may read it.",
		Tags: []string{familiesTag}, Security: secured(), Errors: []int{http.StatusUnauthorized},
	}, func(context.Context, *struct{}) (*catalogOutput, error) {
		return &catalogOutput{Body: c}, nil
	})
}
