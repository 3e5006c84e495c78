package notify

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dabom/dpcs/envelope"
)

// KindWeeklySummary is a family's week for its owners: how much each member
// used, how often each was blocked, and the requests made and answered. It
// is stored in the inbox and pushed like the others, for owners only (as a
// request for more data is), once per family and week (its dedupe key,
// WeeklySummaryKey).
const KindWeeklySummary envelope.SubType = "WEEKLY_SUMMARY"

// ownersOnly reports whether only owners (and the back office) see
// notifications of kind k.
func ownersOnly(k envelope.SubType) bool { return k == OwnersOnlyKind || k == KindWeeklySummary }

// WeeklySummary is the payload of a KindWeeklySummary notification.
type WeeklySummary struct {
	FamilyID int64 `json:"familyId"`
	// Week is the ISO week summed ("2026-W47"); From and To its first and
	// last day (YYYY-MM-DD) in the service zone.
	Week string `json:"week"`
	From string `json:"from"`
	To   string `json:"to"`
	// UsedBytes is what the family used (allowed events), Blocked how many
	// of its events were blocked.
	UsedBytes int64                 `json:"usedBytes"`
	Blocked   int64                 `json:"blocked"`
	Members   []WeeklySummaryMember `json:"members"`
	// Requests are the requests for more data or time made in the week, and
	// how many of them were approved or declined (the rest still wait).
	Requests struct {
		Made     int `json:"made"`
		Approved int `json:"approved"`
		Declined int `json:"declined"`
	} `json:"requests"`
}

// WeeklySummaryMember is one member's week.
type WeeklySummaryMember struct {
	CustomerID int64  `json:"customerId"`
	Name       string `json:"name"`
	Role       string `json:"role"`
	UsedBytes  int64  `json:"usedBytes"`
	Blocked    int64  `json:"blocked"`
}

// WeeklySummaryKey is the dedupe key (and event id) of family fid's
// summary of week ("2026-W47"): one per family and week.
func WeeklySummaryKey(fid int64, week string) string {
	return "weekly:" + strconv.FormatInt(fid, 10) + ":" + week
}

// WeeklySummaryNotification returns the notification of s, with texts in
// lang, created at at.
func WeeklySummaryNotification(s WeeklySummary, at time.Time, lang Lang) (Notification, error) {
	if s.FamilyID <= 0 || s.Week == "" {
		return Notification{}, fmt.Errorf("%w: a weekly summary needs a family and a week", ErrInvalid)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return Notification{}, fmt.Errorf("notify: weekly summary: %w", err)
	}
	key := WeeklySummaryKey(s.FamilyID, s.Week)
	n := Notification{EventID: key, DedupeKey: key, FamilyID: s.FamilyID, Kind: KindWeeklySummary, Payload: raw, CreatedAt: at.UTC()}
	n.Title, n.Body = weeklyText(s, lang == English)
	return n, nil
}

// weeklyText says the week in a line per subject: the family's use, each
// member's (most first, with its blocks), the requests.
func weeklyText(s WeeklySummary, en bool) (title, body string) {
	day := func(d string) string { // YYYY-MM-DD → 11/16
		if len(d) != 10 {
			return d
		}
		m, _ := strconv.Atoi(d[5:7])
		dd, _ := strconv.Atoi(d[8:10])
		return fmt.Sprintf("%d/%d", m, dd)
	}
	var parts []string
	if en {
		parts = append(parts, fmt.Sprintf("%s–%s: the family used %s.", day(s.From), day(s.To), humanBytes(s.UsedBytes)))
	} else {
		parts = append(parts, fmt.Sprintf("%s–%s 가족이 %s를 썼습니다.", day(s.From), day(s.To), humanBytes(s.UsedBytes)))
	}
	var who []string
	for _, m := range s.Members {
		switch {
		case m.Blocked > 0 && en:
			who = append(who, fmt.Sprintf("%s %s (blocked %d×)", m.Name, humanBytes(m.UsedBytes), m.Blocked))
		case m.Blocked > 0:
			who = append(who, fmt.Sprintf("%s %s (차단 %d번)", m.Name, humanBytes(m.UsedBytes), m.Blocked))
		default:
			who = append(who, fmt.Sprintf("%s %s", m.Name, humanBytes(m.UsedBytes)))
		}
	}
	if len(who) > 0 {
		parts = append(parts, strings.Join(who, ", ")+".")
	}
	r := s.Requests
	switch {
	case r.Made == 0 && en:
		parts = append(parts, "No requests.")
	case r.Made == 0:
		parts = append(parts, "부탁은 없었습니다.")
	case en:
		parts = append(parts, fmt.Sprintf("Requests: %d (%d approved, %d declined).", r.Made, r.Approved, r.Declined))
	default:
		parts = append(parts, fmt.Sprintf("부탁 %d건 (승인 %d, 거절 %d).", r.Made, r.Approved, r.Declined))
	}
	if en {
		return "Your family's week", strings.Join(parts, " ")
	}
	return "지난주 가족 데이터 요약", strings.Join(parts, " ")
}
