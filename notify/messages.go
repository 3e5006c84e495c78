package notify

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
)

// Lang is the language of notification texts.
type Lang string

// The languages notify writes. Korean is the default, as in the family app
// (doc/frontends.md); English is the other.
const (
	Korean  Lang = "ko"
	English Lang = "en"
)

// Text returns the title and body of a notification payload in lang (Korean
// for any language other than English). THRESHOLD_ALERT uses the seed's
// wording; CUSTOMER_BLOCKED says why by the block reason (or the decision
// code when present): a data limit, a time block, a manual block, an app or
// category block, the family pool.
func Text(p envelope.Notification, lang Lang) (title, body string) {
	return TextWith(p, lang, Labels{})
}

// TextFor is Text naming the member a block or a request for more data is
// about by name ("민지님") instead of by id; name "" is Text.
func TextFor(p envelope.Notification, lang Lang, name string) (title, body string) {
	return TextWith(p, lang, Labels{Member: name})
}

// Labels are the names the texts give what a payload names by id.
type Labels struct {
	// Member is the display name of the member a block or a request is
	// about; "": the member's id.
	Member string
	// Apps are the operator's names of the apps the payload names (its
	// catalog, WithApps). An app not in it is named by
	// policy.DefaultAppLabels, else as "an app": texts never show a
	// package id.
	Apps map[string]policy.AppLabel
}

// app is how people know app id in the language: "" when no catalog knows
// it.
func (l Labels) app(id string, en bool) string {
	a, ok := l.Apps[id]
	if !ok {
		a, ok = policy.DefaultAppLabels()[id]
	}
	switch {
	case !ok:
		return ""
	case en && a.NameEn != "":
		return a.NameEn
	}
	return a.Name
}

// appOr is app, or the generic word for an app no catalog knows.
func (l Labels) appOr(id string, en bool) string {
	if n := l.app(id, en); n != "" {
		return n
	}
	if en {
		return "an app"
	}
	return "앱"
}

// TextWith is Text with the names of labels.
func TextWith(p envelope.Notification, lang Lang, l Labels) (title, body string) {
	en := lang == English
	name := l.Member
	switch p := p.(type) {
	case envelope.ThresholdAlert:
		if en {
			return "Family data running low", fmt.Sprintf("Less than %d%% of the family data is left! Please top up.", p.ThresholdPercent)
		}
		return "가족 데이터 잔여량 알림", policy.ThresholdAlertText(p.ThresholdPercent)
	case envelope.CustomerBlocked:
		// A block reaches the whole family: the title says whose.
		if en {
			if name != "" {
				return "Data blocked for " + name, blockedText(p, true, l)
			}
			return "Data blocked", blockedText(p, true, l)
		}
		if name != "" {
			return name + "님 데이터 차단", blockedText(p, false, l)
		}
		return "데이터 차단", blockedText(p, false, l)
	case envelope.DataRequested:
		return requestedText(p, en, l)
	case envelope.DataRequestAnswered:
		return answeredText(p, en, l)
	case envelope.DataGifted:
		return giftedText(p, en)
	case envelope.QuotaUpdated:
		left := humanBytes(p.FamilyRemainingBytes)
		if en {
			return "Family data updated", fmt.Sprintf("%s of family data left (%.1f%% used).", left, p.FamilyUsedPercent)
		}
		return "가족 데이터 사용량", fmt.Sprintf("가족 데이터가 %s 남았습니다 (%.1f%% 사용).", left, p.FamilyUsedPercent)
	}
	if en {
		return "Notification", ""
	}
	return "알림", ""
}

// MemberThresholdText is a THRESHOLD_ALERT's body for a member who is not an
// owner: only owners can top up, so it says to ask one (the stored text,
// Text's, is the owners').
func MemberThresholdText(percent int, lang Lang) string {
	if lang == English {
		return fmt.Sprintf("Less than %d%% of the family data is left. Ask a parent if you need more.", percent)
	}
	return fmt.Sprintf("가족 데이터가 %d%% 미만 남았습니다. 더 필요하면 보호자에게 부탁하세요.", percent)
}

// blockedText explains a block. Decision codes and reasons are the policy
// package's (BLOCKED_LIMIT_DAILY / LIMIT:DATA:DAILY, …); notify keeps its own
// copy of the strings so it does not depend on the engine.
func blockedText(p envelope.CustomerBlocked, en bool, l Labels) string {
	reason, arg := p.BlockReason, ""
	kind := ""
	switch {
	case p.Decision == "BLOCKED_LIMIT_DAILY" || reason == "LIMIT:DATA:DAILY":
		kind = "daily"
	case p.Decision == "BLOCKED_LIMIT_MONTHLY" || reason == "LIMIT:DATA:MONTHLY":
		kind = "monthly"
	case p.Decision == "BLOCKED_TIME" || strings.HasPrefix(reason, "BLOCK:TIME:"):
		kind = "time"
	case p.Decision == "BLOCKED_ACCESS" || reason == "BLOCK:ACCESS":
		kind = "manual"
	case strings.HasPrefix(reason, "LIMIT:DATA:APP:"):
		kind, arg = "budget", l.app(strings.TrimPrefix(reason, "LIMIT:DATA:APP:"), en)
	case strings.HasPrefix(reason, "LIMIT:DATA:CATEGORY:"):
		kind, arg = "categoryBudget", categoryName(strings.TrimPrefix(reason, "LIMIT:DATA:CATEGORY:"), en)
	case p.Decision == "BLOCKED_APP_LIMIT":
		kind = "budget"
	case strings.HasPrefix(reason, "BLOCK:APP:"):
		kind, arg = "app", l.app(strings.TrimPrefix(reason, "BLOCK:APP:"), en)
	case strings.HasPrefix(reason, "BLOCK:CATEGORY:"):
		kind, arg = "category", categoryName(strings.TrimPrefix(reason, "BLOCK:CATEGORY:"), en)
	case p.Decision == "BLOCKED_APP":
		kind = "app"
	case p.Decision == "BLOCKED_FAMILY_QUOTA" || reason == "POOL" || reason == "POOL:UNPROVISIONED":
		kind = "family"
	case p.Decision == "BLOCKED_NOT_MEMBER" || reason == "MEMBERSHIP":
		kind = "member"
	}
	if en {
		switch kind {
		case "daily":
			return "Blocked: the daily data limit was reached."
		case "monthly":
			return "Blocked: the monthly data limit was reached."
		case "time":
			return "Data is blocked during this time window."
		case "manual":
			return "Data use was blocked by a parent."
		case "app":
			if arg == "" {
				return "This app is blocked."
			}
			return fmt.Sprintf("%s is blocked.", arg)
		case "category":
			if arg == "" {
				return "Apps of this category are blocked."
			}
			return fmt.Sprintf("%s apps are blocked.", arg)
		case "budget":
			if arg == "" {
				return "This app's data for today is used up. Other apps still work."
			}
			return fmt.Sprintf("%s's data for today is used up. Other apps still work.", arg)
		case "categoryBudget":
			if arg == "" {
				return "Today's data for apps of this category is used up. Other apps still work."
			}
			return fmt.Sprintf("Today's data for %s apps is used up. Other apps still work.", arg)
		case "family":
			return "Blocked: the family data is used up until a parent tops up."
		case "member":
			return "Blocked: not a member of this family plan."
		}
		return "Data use was blocked."
	}
	switch kind {
	case "daily":
		return "일일 데이터 한도 초과로 차단되었습니다."
	case "monthly":
		return "데이터 한도 초과로 차단되었습니다."
	case "time":
		return "차단 시간대라 데이터 사용이 차단되었습니다."
	case "manual":
		return "보호자가 데이터 사용을 차단했습니다."
	case "app":
		if arg == "" {
			return "차단된 앱입니다."
		}
		return fmt.Sprintf("%s 앱 사용이 차단되었습니다.", arg)
	case "category":
		if arg == "" {
			return "이 분류의 앱 사용이 차단되었습니다."
		}
		return fmt.Sprintf("%s 앱 사용이 차단되었습니다.", arg)
	case "budget":
		if arg == "" {
			return "이 앱의 오늘 데이터를 다 썼습니다. 다른 앱은 계속 쓸 수 있습니다."
		}
		return fmt.Sprintf("%s 앱의 오늘 데이터를 다 썼습니다. 다른 앱은 계속 쓸 수 있습니다.", arg)
	case "categoryBudget":
		if arg == "" {
			return "이 분류 앱의 오늘 데이터를 다 썼습니다. 다른 앱은 계속 쓸 수 있습니다."
		}
		return fmt.Sprintf("%s 앱의 오늘 데이터를 다 썼습니다. 다른 앱은 계속 쓸 수 있습니다.", arg)
	case "family":
		return "가족 데이터를 모두 사용하여 차단되었습니다. 보호자가 충전하면 다시 쓸 수 있습니다."
	case "member":
		return "가족 요금제 구성원이 아니어서 차단되었습니다."
	}
	return "데이터 사용이 차단되었습니다."
}

// categoryName is an app category as the family app names it (policy's
// catalog categories; notify keeps its own copy); "" for an unknown one.
func categoryName(c string, en bool) string {
	names := map[string][2]string{
		"VIDEO": {"동영상", "Video"}, "GAME": {"게임", "Game"}, "SOCIAL": {"SNS", "Social"},
		"MESSAGING": {"메신저", "Messaging"}, "WEB": {"웹", "Web"}, "MUSIC": {"음악", "Music"},
	}
	n, ok := names[c]
	switch {
	case !ok:
		return ""
	case en:
		return n[1]
	}
	return n[0]
}

// requestedText is DATA_REQUESTED for the owners: who asked (by name, or by
// member id when the name is not known), how much, and the member's message.
func requestedText(p envelope.DataRequested, en bool, l Labels) (title, body string) {
	name := l.Member
	if p.Kind == envelope.KindTime || p.Kind == envelope.KindApp {
		return timeRequestedText(p, en, l)
	}
	amount := humanBytes(p.AmountBytes)
	if en {
		who := fmt.Sprintf("Member %d", p.CustomerID)
		if name != "" {
			who = name
		}
		body = fmt.Sprintf("%s asks for %s more data.", who, amount)
		if p.Message != "" {
			body += fmt.Sprintf(" \"%s\"", p.Message)
		}
		return "Data request", body
	}
	who := fmt.Sprintf("구성원 %d", p.CustomerID)
	if name != "" {
		who = name
	}
	body = fmt.Sprintf("%s님이 데이터 %s 추가를 요청했습니다.", who, amount)
	if p.Message != "" {
		body += fmt.Sprintf(" \"%s\"", p.Message)
	}
	return "데이터 추가 요청", body
}

// timeRequestedText is DATA_REQUESTED of a TIME or APP request: "민지님이
// 쉬는 시간에 30분 더 쓰게 해 달라고 요청했습니다", "… 유튜브를 15분 더 …".
func timeRequestedText(p envelope.DataRequested, en bool, l Labels) (title, body string) {
	name := l.Member
	if en {
		who := fmt.Sprintf("Member %d", p.CustomerID)
		if name != "" {
			who = name
		}
		if p.Kind == envelope.KindApp {
			body = fmt.Sprintf("%s asks for %d more minutes of %s.", who, p.Minutes, l.appOr(p.AppID, true))
		} else {
			body = fmt.Sprintf("%s asks for %d more minutes during downtime.", who, p.Minutes)
		}
		if p.Message != "" {
			body += fmt.Sprintf(" \"%s\"", p.Message)
		}
		return "Time request", body
	}
	who := fmt.Sprintf("구성원 %d", p.CustomerID)
	if name != "" {
		who = name
	}
	if p.Kind == envelope.KindApp {
		app := l.appOr(p.AppID, false)
		body = fmt.Sprintf("%s님이 %s%s %d분 더 쓰게 해 달라고 요청했습니다.", who, app, objectParticle(app), p.Minutes)
	} else {
		body = fmt.Sprintf("%s님이 쉬는 시간에 %d분 더 쓰게 해 달라고 요청했습니다.", who, p.Minutes)
	}
	if p.Message != "" {
		body += fmt.Sprintf(" \"%s\"", p.Message)
	}
	return "시간 연장 요청", body
}

// timeAnsweredText is DATA_REQUEST_ANSWERED of a TIME or APP request.
func timeAnsweredText(p envelope.DataRequestAnswered, en bool, l Labels) (title, body string) {
	what := fmt.Sprintf("%d분 더", p.Minutes)
	if en {
		what = fmt.Sprintf("%d more minutes", p.Minutes)
	}
	if p.Kind == envelope.KindApp {
		if en {
			what += " of " + l.appOr(p.AppID, true)
		} else {
			what = l.appOr(p.AppID, false) + " " + what
		}
	}
	until := ""
	if len(p.Until) == 12 {
		until = p.Until[8:10] + ":" + p.Until[10:12]
	}
	switch {
	case p.Status == envelope.AnswerDeclined && en:
		body, title = fmt.Sprintf("Your request for %s was declined.", what), "Time request declined"
	case p.Status == envelope.AnswerDeclined:
		body, title = fmt.Sprintf("%s 요청이 거절되었습니다.", what), "시간 연장 요청 거절"
	case en:
		body, title = fmt.Sprintf("Approved: %s, until %s.", what, until), "Time request approved"
	default:
		body, title = fmt.Sprintf("승인되었습니다: %s, %s까지 쓸 수 있습니다.", what, until), "시간 연장 요청 승인"
	}
	if p.Reason != "" {
		body += fmt.Sprintf(" \"%s\"", p.Reason)
	}
	return title, body
}

// objectParticle is the object particle after word: 을 after a final
// consonant (멜론을), 를 after a vowel (유튜브를), 을(를) when the word does
// not end in Hangul.
func objectParticle(word string) string {
	r, _ := utf8.DecodeLastRuneInString(word)
	switch {
	case r < 0xAC00 || r > 0xD7A3:
		return "을(를)"
	case (r-0xAC00)%28 != 0:
		return "을"
	}
	return "를"
}

// answeredText is DATA_REQUEST_ANSWERED for the member who asked.
func answeredText(p envelope.DataRequestAnswered, en bool, l Labels) (title, body string) {
	if p.Kind == envelope.KindTime || p.Kind == envelope.KindApp {
		return timeAnsweredText(p, en, l)
	}
	amount := humanBytes(p.AmountBytes)
	if p.Status == envelope.AnswerDeclined {
		if en {
			body = fmt.Sprintf("Your request for %s more data was declined.", amount)
			if p.Reason != "" {
				body += fmt.Sprintf(" \"%s\"", p.Reason)
			}
			return "Data request declined", body
		}
		body = fmt.Sprintf("데이터 %s 추가 요청이 거절되었습니다.", amount)
		if p.Reason != "" {
			body += fmt.Sprintf(" \"%s\"", p.Reason)
		}
		return "데이터 요청 거절", body
	}
	if en {
		switch p.Grant {
		case envelope.GrantDay:
			body = fmt.Sprintf("Approved: %s more data for today.", amount)
		case envelope.GrantMonth:
			body = fmt.Sprintf("Approved: %s more data for this month.", amount)
		default:
			body = fmt.Sprintf("Approved: %s was added to the family data.", amount)
		}
		if p.Reason != "" {
			body += fmt.Sprintf(" \"%s\"", p.Reason)
		}
		return "Data request approved", body
	}
	switch p.Grant {
	case envelope.GrantDay:
		body = fmt.Sprintf("승인되었습니다: 오늘 데이터 %s가 추가되었습니다.", amount)
	case envelope.GrantMonth:
		body = fmt.Sprintf("승인되었습니다: 이번 달 데이터 %s가 추가되었습니다.", amount)
	default:
		body = fmt.Sprintf("승인되었습니다: 가족 데이터에 %s가 충전되었습니다.", amount)
	}
	if p.Reason != "" {
		body += fmt.Sprintf(" \"%s\"", p.Reason)
	}
	return "데이터 요청 승인", body
}

// giftedText is DATA_GIFTED for the member it tells, naming people by the
// names the event carries (a member's id when it has none): the receiver
// is told who gave how much ("엄마님이 데이터 500 MB를 선물했습니다"), the
// giver gets its confirmation. A gift an owner made of another member's
// data, or the back office, says who made it and whose data it was, never
// "my" allowance (#38). Titles say whose gift, as a block's does.
func giftedText(p envelope.DataGifted, en bool) (title, body string) {
	who := func(id int64, name string) string {
		switch {
		case name != "":
			return name
		case en:
			return fmt.Sprintf("Member %d", id)
		}
		return fmt.Sprintf("구성원 %d", id)
	}
	from, to := who(p.FromCustomerID, p.FromName), who(p.ToCustomerID, p.ToName)
	by := ""
	switch p.GivenBy {
	case p.FromCustomerID:
		by = from
	case p.ToCustomerID:
		by = to
	case 0:
	default:
		by = who(p.GivenBy, p.ByName)
	}
	amount := strings.Replace(humanBytes(p.AmountBytes), ".0 ", " ", 1)
	if en { // one sentence for both members, then what it means for each
		switch {
		case p.GivenBy == p.FromCustomerID:
			body = fmt.Sprintf("%s gave %s %s of data.", from, to, amount)
		case by != "":
			body = fmt.Sprintf("%s gave %s %s of %s's data.", by, to, amount, from)
		default:
			body = fmt.Sprintf("Customer care moved %s of %s's data to %s.", amount, from, to)
		}
		if p.Received() {
			return "Data gift for " + to, body + fmt.Sprintf(" %s can use that much more this month.", to)
		}
		return "Data gift from " + from + " sent", body + fmt.Sprintf(" %s can use that much less this month.", from)
	}
	if p.Received() {
		title = to + "님에게 데이터 선물 도착"
		switch {
		case p.GivenBy == p.FromCustomerID:
			body = fmt.Sprintf("%s님이 데이터 %s를 선물했습니다.", from, amount)
		case by != "":
			body = fmt.Sprintf("%s님이 %s님의 데이터 %s를 선물했습니다.", by, from, amount)
		default:
			body = fmt.Sprintf("고객센터에서 %s님의 데이터 %s를 옮겨 드렸습니다.", from, amount)
		}
		return title, body + " 이번 달에 그만큼 더 쓸 수 있습니다."
	}
	title = from + "님의 데이터 선물 완료"
	switch {
	case p.GivenBy == p.FromCustomerID:
		body = fmt.Sprintf("%s님에게 데이터 %s를 선물했습니다.", to, amount)
	case by != "":
		body = fmt.Sprintf("%s님이 %s님의 데이터 %s를 %s님에게 선물했습니다.", by, from, amount, to)
	default:
		body = fmt.Sprintf("고객센터에서 %s님의 데이터 %s를 %s님에게 옮겼습니다.", from, amount, to)
	}
	if p.GivenBy == p.FromCustomerID {
		return title, body + " 이번 달에 쓸 수 있는 데이터가 그만큼 줄었습니다."
	}
	return title, body + fmt.Sprintf(" %s님이 이번 달에 쓸 수 있는 데이터가 그만큼 줄었습니다.", from)
}

// humanBytes formats n in binary units with one decimal: "2.0 MB", "50.0 GB".
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "KMGTP"[exp])
}
