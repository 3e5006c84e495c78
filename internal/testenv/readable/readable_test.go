package readable

import "testing"

func TestProblems(t *testing.T) {
	for _, ok := range []string{"유튜브 앱 사용이 차단되었습니다.", "자녀1님이 YouTube Music을 30분 더 쓰고 싶어 합니다.", "11월 27일 오후 4:44",
		"받은 선물 100 MB", "Samsung Internet", "010-1234-5678", "2026-11-27",
		"TikTok을(를) 막았습니다."} {
		if p := Problems(ok); len(p) > 0 {
			t.Errorf("%q: %v", ok, p)
		}
	}
	for _, bad := range []string{"com.youtube.app 앱 사용이 차단되었습니다.", "LIMIT:DATA:MONTHLY=52428800", "선물: -104857600",
		"2026-11-27T16:18:26Z", "the family data is used up", "상태 BLOCKED_LIMIT_DAILY",
		"데이터 양을(를) 다시 확인해 주세요.", "템플릿 “밤 차단”을(를) 지울까요?", "3이(가) 남았습니다"} {
		if p := Problems(bad); len(p) == 0 {
			t.Errorf("%q passed", bad)
		}
	}
}
