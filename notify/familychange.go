package notify

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/dabom/dpcs/envelope"
)

// KindFamilyChanged is a live-only notification (never stored: no inbox
// row, no SSE id, no channel): a change to the family was committed — a
// policy, the plan, alert levels, a top-up, a gift, a member added or
// removed, a role, a password reset, a request made or answered. Every
// member of the family sees it (MemberID 0); its payload (FamilyChange)
// names what changed and for whom, not how, so a screen reads what it
// shows again. It is what makes another parent's or a child's screen
// follow a change within a second (doc/frontends.md, "Live").
const KindFamilyChanged envelope.SubType = "FAMILY_CHANGED"

// FamilyChange is the payload of a KindFamilyChanged notification.
type FamilyChange struct {
	// Change is the kind of change: POLICY, PLAN, THRESHOLDS, TOPUP, GIFT,
	// MEMBER, REMOVED, ROLE, PASSWORD or REQUEST.
	Change string `json:"change"`
	// Members are the members it is about (none: the whole family).
	Members []int64 `json:"members,omitempty"`
	// By is the member (or back-office account) who made it; 0: the system.
	By int64 `json:"by,omitempty"`
}

// FamilyChanged returns the live notification of change c to family fid at
// at, with texts in lang (shown by no screen; for logs and tools).
func FamilyChanged(fid int64, c FamilyChange, at time.Time, lang Lang) (Notification, error) {
	if fid <= 0 {
		return Notification{}, fmt.Errorf("%w: family id must be > 0", ErrInvalid)
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return Notification{}, fmt.Errorf("notify: family change: %w", err)
	}
	n := Notification{FamilyID: fid, Kind: KindFamilyChanged, Payload: raw, CreatedAt: at.UTC()}
	n.Title, n.Body = familyChangeText(c, lang == English)
	return n, nil
}

// familyChangeText says what changed, without names (the payload has ids).
func familyChangeText(c FamilyChange, en bool) (title, body string) {
	words := map[string][2]string{
		"POLICY":     {"구성원의 사용 규칙이 바뀌었습니다.", "A member's rules changed."},
		"PLAN":       {"가족 요금제 데이터가 바뀌었습니다.", "The family plan changed."},
		"THRESHOLDS": {"데이터 잔여량 알림 기준이 바뀌었습니다.", "The alert levels changed."},
		"TOPUP":      {"가족 데이터가 충전되었습니다.", "Data was added to the family."},
		"GIFT":       {"구성원끼리 데이터를 선물했습니다.", "Members gave data to each other."},
		"MEMBER":     {"가족 구성원이 추가되었습니다.", "A member was added."},
		"REMOVED":    {"가족 구성원이 삭제되었습니다.", "A member was removed."},
		"ROLE":       {"구성원의 역할이 바뀌었습니다.", "A member's role changed."},
		"PASSWORD":   {"구성원의 비밀번호가 재설정되었습니다.", "A member's password was reset."},
		"REQUEST":    {"부탁이 새로 오거나 답을 받았습니다.", "A request was made or answered."},
	}
	w, ok := words[c.Change]
	if !ok {
		w = [2]string{"가족 설정이 바뀌었습니다.", "The family's settings changed."}
	}
	if en {
		return "Family changed", w[1]
	}
	return "가족 설정 변경", w[0]
}
