// Package access carries access events between API processes: a member
// removed, a role changed, a session ended or a refresh token reused, so
// that every process closes the live streams the event concerns (Local in
// one process, Redis over a Redis channel between many; doc/security.md).
package access
