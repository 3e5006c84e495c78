package charging

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dabom/dpcs/policy"
)

// Coverage is the traffic a rating group stands for: one app, one app
// category, or (both empty) any traffic. A grant for it is judged as usage
// of that app or category is (blocks, windows, exceptions, always-allowed).
type Coverage struct {
	AppID    string
	Category policy.Category
}

// RatingGroups maps the network's rating groups to what they cover. A
// rating group it does not name covers any traffic.
type RatingGroups map[uint32]Coverage

// DefaultRatingGroups is the mapping DPCS uses unless the operator sets one
// (DPCS_CHARGING_RATING_GROUPS): one rating group per app category.
const DefaultRatingGroups = "10=VIDEO,20=GAME,30=SOCIAL,40=MESSAGING,50=WEB,60=MUSIC"

// ParseRatingGroups reads a mapping written <ratingGroup>=<CATEGORY> or
// <ratingGroup>=app:<appId>, comma-separated ("10=VIDEO,11=app:com.youtube.app").
// Empty is no mapping: every rating group covers any traffic.
func ParseRatingGroups(s string) (RatingGroups, error) {
	out := RatingGroups{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want <ratingGroup>=<CATEGORY> or <ratingGroup>=app:<appId>", item)
		}
		rg, err := strconv.ParseUint(strings.TrimSpace(k), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%q: the rating group must be a whole number from 0 to 4294967295", item)
		}
		if _, dup := out[uint32(rg)]; dup {
			return nil, fmt.Errorf("rating group %d is mapped twice", rg)
		}
		v = strings.TrimSpace(v)
		if app, isApp := strings.CutPrefix(v, "app:"); isApp {
			if app == "" || len(app) > policy.MaxAppIDLen || strings.ContainsAny(app, " ,=") {
				return nil, fmt.Errorf("%q: want app:<appId> with an app id of 1 to %d bytes", item, policy.MaxAppIDLen)
			}
			out[uint32(rg)] = Coverage{AppID: app}
			continue
		}
		cat := policy.Category(strings.ToUpper(v))
		if !slices.Contains(policy.Categories(), cat) {
			return nil, fmt.Errorf("%q: unknown category %q (want one of %v, or app:<appId>)", item, v, policy.Categories())
		}
		out[uint32(rg)] = Coverage{Category: cat}
	}
	return out, nil
}

// Of is what rating group rg covers.
func (g RatingGroups) Of(rg uint32) Coverage { return g[rg] }

// ParseGrantCharged reads the traffic the network charges through grants
// (DPCS_GRANT_CHARGED, doc/wire-format.md "Charged once"): "all", or the
// traffic its online rating groups cover written as DPCS_CHARGING_RATING_GROUPS'
// right sides, <CATEGORY> or app:<appId>, comma-separated ("VIDEO,app:com.kakao.talk").
// It returns whether a usage event of app appID in category cat is such
// traffic (judge.WithGrantCharged); nil for "" (none: every event charges).
func ParseGrantCharged(s string) (func(appID string, cat policy.Category) bool, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return nil, nil
	case strings.EqualFold(s, "all"):
		return func(string, policy.Category) bool { return true }, nil
	}
	var items []string
	for i, item := range strings.Split(s, ",") {
		items = append(items, strconv.Itoa(i)+"="+strings.TrimSpace(item))
	}
	g, err := ParseRatingGroups(strings.Join(items, ","))
	if err != nil {
		return nil, err
	}
	apps, cats := map[string]bool{}, map[policy.Category]bool{}
	for _, c := range g {
		if c.AppID != "" {
			apps[c.AppID] = true
		} else {
			cats[c.Category] = true
		}
	}
	return func(appID string, cat policy.Category) bool { return apps[appID] || (cat != "" && cats[cat]) }, nil
}
