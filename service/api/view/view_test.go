package view

import (
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/service/store"
)

// TestTextResolve: text is stored in NFC, line feeds only where a
// MultilineText allows them, and a refusal is located at the field.
func TestTextResolve(t *testing.T) {
	at := huma.NewPathBuffer([]byte("body.name"), len("body.name"))
	nfd := Text("e\u0301")
	if errs := nfd.Resolve(nil, at); len(errs) != 0 || nfd != "\u00e9" {
		t.Fatalf("NFD name: %q %v", nfd, errs)
	}
	line := Text("a\nb")
	errs := line.Resolve(nil, at)
	if len(errs) != 1 || errs[0].(*huma.ErrorDetail).Location != "body.name" {
		t.Fatalf("a line feed in a Text: %v", errs)
	}
	lines := MultilineText("a\nb")
	if errs := lines.Resolve(nil, at); len(errs) != 0 || lines != "a\nb" {
		t.Fatalf("a line feed in a MultilineText: %q %v", lines, errs)
	}
	if zw := MultilineText("a\u200bb"); len(zw.Resolve(nil, at)) != 1 {
		t.Fatal("an invisible character accepted")
	}
	for _, s := range []*huma.Schema{new(Text).TransformSchema(nil, &huma.Schema{}), new(MultilineText).TransformSchema(nil, &huma.Schema{})} {
		if s.Description == "" {
			t.Error("a text field's schema does not state the rule")
		}
	}
}

// TestUsageShares: never nil (the document's arrays are never null).
func TestUsageShares(t *testing.T) {
	apps, hours := UsageShares(store.UsageReport{})
	if apps == nil || hours == nil {
		t.Fatal("nil shares")
	}
	h := time.Date(2026, 2, 10, 12, 0, 0, 0, time.UTC)
	apps, hours = UsageShares(store.UsageReport{ByApp: []store.AppUsage{{AppID: "a", AllowedBytes: 2, Events: 1}},
		ByHour: []store.HourUsage{{Hour: h, AllowedBytes: 2, Events: 1}}})
	if apps[0] != (AppUsageView{AppID: "a", AllowedBytes: 2, Events: 1}) || hours[0] != (HourUsageView{Hour: h, AllowedBytes: 2, Events: 1}) {
		t.Fatalf("%+v %+v", apps, hours)
	}
	if len(Secured()) != 1 {
		t.Fatal("Secured names no scheme")
	}
}
