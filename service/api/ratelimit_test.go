package api

import (
	"net/netip"
	"testing"
	"time"

	"github.com/dabom/dpcs/service/limit"
	"github.com/google/go-cmp/cmp"
)

func TestAuthLimitsDefaults(t *testing.T) {
	got, err := AuthLimits{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := AuthLimits{LoginPerAddress: limit.Rate{N: 60, Per: time.Minute}, LoginPerLogin: limit.Rate{N: 10, Per: time.Minute},
		RefreshPerAddress: limit.Rate{N: 120, Per: time.Minute}, LockoutAfter: 10, LockoutFor: 15 * time.Minute}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	for name, l := range map[string]AuthLimits{
		"rate":     {LoginPerLogin: limit.Rate{N: -1, Per: time.Minute}},
		"per":      {RefreshPerAddress: limit.Rate{N: 1, Per: 0}},
		"after":    {LockoutAfter: -1},
		"lock for": {LockoutFor: time.Millisecond},
	} {
		if _, err := l.withDefaults(); err == nil {
			t.Errorf("%s: accepted %+v", name, l)
		}
	}
}

func TestNormalLogin(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"1001", "id:1001"}, {"+1001", "id:1001"}, {"001001", "id:1001"}, {" 1001 ", "id:1001"},
		{"010-1234", "phone:010-1234"}, {" Ops ", "phone:ops"}, {"0", "phone:0"}, {"-5", "phone:-5"},
	} {
		if got := normalLogin(c.in); got != c.want {
			t.Errorf("normalLogin(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestClientAddr(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for _, c := range []struct {
		name, remote string
		xff          []string
		trusted      []netip.Prefix
		want         string
	}{
		{"peer", "192.0.2.1:5555", nil, nil, "192.0.2.1"},
		{"xff ignored without trusted proxies", "10.0.0.1:5555", []string{"198.51.100.7"}, nil, "10.0.0.1"},
		{"xff ignored from an untrusted peer", "192.0.2.1:5555", []string{"198.51.100.7"}, proxies, "192.0.2.1"},
		{"client behind a trusted proxy", "10.0.0.1:5555", []string{"198.51.100.7"}, proxies, "198.51.100.7"},
		{"forged left part ignored", "10.0.0.1:5555", []string{"1.2.3.4, 198.51.100.7"}, proxies, "198.51.100.7"},
		{"chain of trusted proxies", "10.0.0.1:5555", []string{"198.51.100.7, 10.1.1.1", "10.2.2.2"}, proxies, "198.51.100.7"},
		{"garbage stops at the last trusted hop", "10.0.0.1:5555", []string{"198.51.100.7, junk, 10.1.1.1"}, proxies, "10.1.1.1"},
		{"all trusted", "10.0.0.1:5555", []string{"10.9.9.9"}, proxies, "10.9.9.9"},
		{"empty header", "10.0.0.1:5555", nil, proxies, "10.0.0.1"},
		{"hop with a port", "10.0.0.1:5555", []string{"198.51.100.7:1234"}, proxies, "198.51.100.7"},
		{"ipv6 peer and hop", "[fd00::1]:443", []string{"[2001:db8::1]"}, proxies, "2001:db8::/64"},
		{"ipv6 peer", "[2001:db8:aa:bb:1:2:3:4]:443", nil, nil, "2001:db8:aa:bb::/64"},
		{"ipv4-mapped", "[::ffff:192.0.2.1]:443", nil, nil, "192.0.2.1"},
		{"not an address", "pipe", nil, nil, "unknown"},
	} {
		if got := addrKey(clientAddr(c.remote, c.xff, c.trusted)); got != c.want {
			t.Errorf("%s: %q", c.name, got)
		}
	}
}
