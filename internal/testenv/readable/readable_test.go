package readable

import "testing"

func TestProblems(t *testing.T) {
	for _, ok := range []string{"유튜브 앱 사용이 차단되었습니다.", "자녀1님이 YouTube Music을 30분 더 쓰고 싶어 합니다.", "11월 27일 오후 4:44",
		"받은 선물 100 MB", "Samsung Internet", "010-1234-5678", "2026-11-27"} {
		if p := Problems(ok); len(p) > 0 {
			t.Errorf("%q: %v", ok, p)
		}
	}
	for _, bad := range []string{"com.youtube.app 앱 사용이 차단되었습니다.", "LIMIT:DATA:MONTHLY=52428800", "선물: -104857600",
		"2026-11-27T16:18:26Z", "the family data is used up", "상태 BLOCKED_LIMIT_DAILY"} {
		if p := Problems(bad); len(p) == 0 {
			t.Errorf("%q passed", bad)
		}
	}
}
