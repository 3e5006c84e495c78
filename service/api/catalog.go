package api

import (
	"context"
	"net/http"

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
	Categories []string     `json:"categories" doc:"Every category, in a stable order" example:"[\"VIDEO\",\"GAME\"]"`
	Apps       []CatalogApp `json:"apps" doc:"Every known app with its category"`
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
	huma.Register(a.api, huma.Operation{OperationID: "get-catalog", Method: http.MethodGet, Path: "/catalog",
		Summary: "The apps and app categories policies can block",
		Description: "The categories (for BLOCK:CATEGORY:<category>) and the known apps with their category " +
			"(for BLOCK:APP:<appId>), as the processor judges them. Any logged-in caller may read it.",
		Tags: []string{familiesTag}, Security: secured(), Errors: []int{http.StatusUnauthorized},
	}, func(context.Context, *struct{}) (*catalogOutput, error) {
		return &catalogOutput{Body: c}, nil
	})
}
