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

// AppLabel is how people see an app: its name in Korean and in English and
// an icon (an emoji, shown beside the name). People never see package ids.
type AppLabel struct {
	Name, NameEn, Icon string
}

// DefaultAppLabels returns the labels of DefaultApps, by app id.
func DefaultAppLabels() map[string]AppLabel {
	return map[string]AppLabel{
		"com.youtube.app":                       {"유튜브", "YouTube", "▶️"},
		"com.netflix.mediaclient":               {"넷플릭스", "Netflix", "🎬"},
		"com.tiktok.app":                        {"틱톡", "TikTok", "🎵"},
		"com.disney.disneyplus":                 {"디즈니+", "Disney+", "🏰"},
		"com.wavve.player":                      {"웨이브", "wavve", "📺"},
		"com.tving.app":                         {"티빙", "TVING", "📺"},
		"com.supercell.clashroyale":             {"클래시 로얄", "Clash Royale", "👑"},
		"com.nexon.maplestory":                  {"메이플스토리", "MapleStory", "🍁"},
		"com.riotgames.league.wildrift":         {"와일드 리프트", "Wild Rift", "⚔️"},
		"com.mojang.minecraftpe":                {"마인크래프트", "Minecraft", "⛏️"},
		"com.roblox.client":                     {"로블록스", "Roblox", "🧱"},
		"com.netmarble.lineage2m":               {"리니지2M", "Lineage2M", "🗡️"},
		"com.instagram.android":                 {"인스타그램", "Instagram", "📷"},
		"com.facebook.katana":                   {"페이스북", "Facebook", "👥"},
		"com.twitter.android":                   {"X (트위터)", "X (Twitter)", "✖️"},
		"com.nhn.band":                          {"밴드", "BAND", "🎗️"},
		"com.kakao.talk":                        {"카카오톡", "KakaoTalk", "💬"},
		"com.whatsapp":                          {"왓츠앱", "WhatsApp", "📞"},
		"jp.naver.line.android":                 {"라인", "LINE", "💚"},
		"org.telegram.messenger":                {"텔레그램", "Telegram", "✈️"},
		"com.android.chrome":                    {"크롬", "Chrome", "🌐"},
		"com.nhn.android.search":                {"네이버", "NAVER", "🔎"},
		"com.daum.android.daum":                 {"다음", "Daum", "🔍"},
		"com.sec.android.app.sbrowser":          {"삼성 인터넷", "Samsung Internet", "🌍"},
		"com.spotify.music":                     {"스포티파이", "Spotify", "🎧"},
		"com.iloen.melon":                       {"멜론", "Melon", "🍈"},
		"com.google.android.apps.youtube.music": {"유튜브 뮤직", "YouTube Music", "🎶"},
		"com.ktmusic.geniemusic":                {"지니뮤직", "genie", "🎼"},
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
