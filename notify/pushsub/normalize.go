package pushsub

import (
	"net/netip"
	"strconv"
	"strings"
)

// Normalize returns a push endpoint's one spelling, so that
// one push service URL is one subscription whatever a client sent: the
// scheme and host in lower case, the host without a trailing dot, no port
// when it is the scheme's default (443 for https, 80 for http), an IPv4
// host in dotted decimal and an IPv6 one in its canonical form; the path,
// query and fragment are kept byte for byte.
//
// An IPv4 host is read as the WHATWG URL standard reads it (what browsers
// and many HTTP stacks do): a host whose last label is a number is an
// address, each label decimal, octal (a leading 0) or hexadecimal (0x),
// the last one filling the remaining bytes — so 127.1, 0x7f000001 and
// 2130706433 are 127.0.0.1. A host that ends in a number but is no such
// address is refused. The error is an *Error at endpoint.
func Normalize(endpoint string) (string, error) {
	bad := func(why string) (string, error) {
		return "", &Error{Field: "endpoint", Reason: "push endpoint " + why}
	}
	scheme, rest, ok := strings.Cut(endpoint, "://")
	scheme = strings.ToLower(scheme)
	if !ok || (scheme != "https" && scheme != "http") {
		return bad("must be an absolute https URL")
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	if authority == "" || strings.Contains(authority, "@") {
		return bad("must be an absolute https URL")
	}
	host, port := authority, ""
	if strings.HasPrefix(host, "[") {
		i := strings.Index(host, "]")
		if i < 0 {
			return bad("has a malformed host")
		}
		host, port = host[:i+1], strings.TrimPrefix(host[i+1:], ":")
		if len(port) == len(authority[i+1:]) && port != "" {
			return bad("has a malformed host")
		}
	} else if h, p, found := strings.Cut(host, ":"); found {
		host, port = h, p
	}
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return bad("has a malformed port")
		}
		port = strconv.FormatUint(n, 10)
		if (scheme == "https" && n == 443) || (scheme == "http" && n == 80) {
			port = ""
		}
	}
	switch {
	case strings.HasPrefix(host, "["):
		a, err := netip.ParseAddr(host[1 : len(host)-1])
		if err != nil {
			return bad("has a malformed IPv6 address")
		}
		host = "[" + a.String() + "]"
	default:
		host = strings.TrimSuffix(strings.ToLower(host), ".")
		if host == "" || strings.HasSuffix(host, ".") {
			return bad("has no host")
		}
		if a, isAddr, ok := legacyIPv4(host); !ok {
			return bad("has a host that ends in a number but is no IPv4 address")
		} else if isAddr {
			host = a.String()
		}
	}
	out := scheme + "://" + host
	if port != "" {
		out += ":" + port
	}
	return out + tail, nil
}

// legacyIPv4 reads host as the WHATWG URL standard's IPv4 parser does:
// isAddr when its last label is a number (decimal digits, or 0x and hex
// digits); then ok says whether it is a valid address in those forms.
func legacyIPv4(host string) (a netip.Addr, isAddr, ok bool) {
	parts := strings.Split(host, ".")
	if !isNumberLabel(parts[len(parts)-1]) {
		return a, false, true
	}
	if len(parts) > 4 {
		return a, true, false
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, ok := parseIPv4Label(p)
		if !ok {
			return a, true, false
		}
		nums[i] = n
	}
	var v uint64
	for i, n := range nums[:len(nums)-1] {
		if n > 255 {
			return a, true, false
		}
		v |= n << (8 * (3 - i))
	}
	last := nums[len(nums)-1]
	if last >= 1<<(8*(5-len(nums))) {
		return a, true, false
	}
	v |= last
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true, true
}

// isNumberLabel: digits only, or 0x followed by hex digits (or nothing).
func isNumberLabel(p string) bool {
	if p == "" {
		return false
	}
	if h, ok := strings.CutPrefix(p, "0x"); ok {
		return strings.Trim(h, "0123456789abcdef") == ""
	}
	return strings.Trim(p, "0123456789") == ""
}

// parseIPv4Label reads one label: 0x hex, a leading 0 octal, else decimal.
func parseIPv4Label(p string) (uint64, bool) {
	base := 10
	switch {
	case strings.HasPrefix(p, "0x"):
		p, base = p[2:], 16
		if p == "" {
			return 0, true
		}
	case len(p) > 1 && p[0] == '0':
		p, base = p[1:], 8
	}
	if p == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(p, base, 64)
	return n, err == nil && n <= 1<<32
}
