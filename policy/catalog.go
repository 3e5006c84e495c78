package policy

// App is an app id with its category.
type App struct {
	ID       string
	Category Category
}

// DefaultApps returns the catalog of real-looking app ids DPCS ships, by category
// (the simulator draws from it; Catalog maps ids to categories for category blocks).
func DefaultApps() []App {
	return []App{
		{"com.youtube.app", CategoryVideo}, {"com.netflix.mediaclient", CategoryVideo},
		{"com.tiktok.app", CategoryVideo}, {"com.disney.disneyplus", CategoryVideo},
		{"com.wavve.player", CategoryVideo}, {"com.tving.app", CategoryVideo},
		{"com.supercell.clashroyale", CategoryGame}, {"com.nexon.maplestory", CategoryGame},
		{"com.riotgames.league.wildrift", CategoryGame}, {"com.mojang.minecraftpe", CategoryGame},
		{"com.roblox.client", CategoryGame}, {"com.netmarble.lineage2m", CategoryGame},
		{"com.instagram.android", CategorySocial}, {"com.facebook.katana", CategorySocial},
		{"com.twitter.android", CategorySocial}, {"com.nhn.band", CategorySocial},
		{"com.kakao.talk", CategoryMessaging}, {"com.whatsapp", CategoryMessaging},
		{"jp.naver.line.android", CategoryMessaging}, {"org.telegram.messenger", CategoryMessaging},
		{"com.android.chrome", CategoryWeb}, {"com.nhn.android.search", CategoryWeb},
		{"com.daum.android.daum", CategoryWeb}, {"com.sec.android.app.sbrowser", CategoryWeb},
		{"com.spotify.music", CategoryMusic}, {"com.iloen.melon", CategoryMusic},
		{"com.google.android.apps.youtube.music", CategoryMusic}, {"com.ktmusic.geniemusic", CategoryMusic},
	}
}

// Catalog maps app ids to categories, so an event that names only its app can
// be judged against BLOCK:CATEGORY constraints.
type Catalog map[string]Category

// NewCatalog builds a catalog from apps.
func NewCatalog(apps []App) Catalog {
	c := make(Catalog, len(apps))
	for _, a := range apps {
		c[a.ID] = a.Category
	}
	return c
}

// Category returns the app's category, or "" when the app is not in the catalog.
func (c Catalog) Category(appID string) Category { return c[appID] }
