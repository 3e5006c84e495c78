package api

import (
	"net/http"
	"strings"
)

// StreamRequest reports whether r asks for the API's live notification
// stream (GET /families/{familyId}/notifications/stream, SSE).
func StreamRequest(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	p := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	return len(p) == 4 && p[0] == "families" && p[1] != "" && p[2] == "notifications" && p[3] == "stream"
}

// SelfTimedRequest reports whether r is a gateway's decision request (POST
// /decisions), whose handler answers by itself when its context ends: the
// HTTP server runs it without http.TimeoutHandler (httpserver.Config.SelfTimed).
func SelfTimedRequest(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Path == "/decisions"
}
