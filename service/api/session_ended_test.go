package api

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// A refused refresh of a session that ended says why (#38: a session ended
// by a password reset or its expiry dropped to a blank login without a
// word): the password was reset since, the member removed, logged out
// elsewhere, or the 7 days passed.
func TestRefreshSaysWhySessionEnded(t *testing.T) {
	f := newAPIFixture(t)
	ended := func(rt string) string {
		t.Helper()
		resp, data := f.do(http.MethodPost, "/auth/refresh", "", map[string]string{"refreshToken": rt})
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("refresh: status %d, want 401: %s", resp.StatusCode, data)
		}
		var p struct {
			Ended string `json:"ended"`
		}
		if err := json.Unmarshal(data, &p); err != nil {
			t.Fatal(err)
		}
		return p.Ended
	}
	owner := f.token(ownerA)

	child := f.login(childA)
	f.call(http.MethodPost, "/families/100/members/1002/password", owner, map[string]string{"password": "a brand new secret"}, http.StatusNoContent, nil)
	if got := ended(child.RefreshToken); got != EndedPassword {
		t.Errorf("after a reset: ended %q, want %q", got, EndedPassword)
	}

	other := f.login(ownerA)
	f.call(http.MethodPost, "/auth/logout", "", map[string]string{"refreshToken": other.RefreshToken}, http.StatusNoContent, nil)
	if got := ended(other.RefreshToken); got != EndedRevoked {
		t.Errorf("after a logout: ended %q, want %q", got, EndedRevoked)
	}

	victim := f.login(victimA)
	f.call(http.MethodDelete, "/families/100/members/1003", owner, nil, http.StatusNoContent, nil)
	if got := ended(victim.RefreshToken); got != EndedRemoved {
		t.Errorf("after a removal: ended %q, want %q", got, EndedRemoved)
	}

	late := f.login(ownerA)
	now := f.clock().Add(8 * 24 * time.Hour)
	f.now.Store(&now)
	if got := ended(late.RefreshToken); got != EndedExpired {
		t.Errorf("after 8 days: ended %q, want %q", got, EndedExpired)
	}
}
