package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/sse"

	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/service/store"
)

func viewer(p Principal) notify.Filter {
	if p.Role.BackOffice() { // an AGENT sees what an ADMIN sees
		return notify.Filter{MemberID: p.ID, Role: notify.RoleAdmin}
	}
	return notify.Filter{MemberID: p.ID, Role: notify.Role(p.Role)}
}

type inboxInput struct {
	FamilyPath
	Before int64 `query:"before" minimum:"0" doc:"Page newest first below this id (the previous page's nextBefore)"`
	After  int64 `query:"after" minimum:"0" doc:"Resume oldest first above this id"`
	Limit  int   `query:"limit" minimum:"0" maximum:"1000" default:"50"`
	Unread bool  `query:"unread" doc:"Leave out notifications the caller marked read"`
}

// InboxPage is a page of the caller's inbox.
type InboxPage struct {
	Items []notify.Notification `json:"items"`
	// NextBefore is the cursor of the next (older) page; 0 when this page
	// was the last.
	NextBefore int64 `json:"nextBefore,omitempty" doc:"The before of the next (older) page; absent on the last page"`
}

type inboxOutput struct {
	Body InboxPage
}

type readInput struct {
	FamilyPath
	NotificationID int64 `path:"notificationId" minimum:"1"`
}

type streamInput struct {
	FamilyPath
	LastEventID int64 `header:"Last-Event-ID" minimum:"0" doc:"Resume after this notification id (sent by EventSource on reconnect)"`
}

// Ping is the keep-alive event of a quiet stream.
type Ping struct {
	At time.Time `json:"at"`
}

func (a *Server) registerStream() {
	tags := []string{notificationsTag}
	huma.Register(a.api, huma.Operation{OperationID: "list-notifications", Method: http.MethodGet,
		Path: "/families/{familyId}/notifications", Summary: "The caller's inbox", Tags: tags, Security: secured(),
		Description: "Owners and admins see every notification of the family, members the family-wide ones and their own. " +
			"Pages newest first with before, or oldest first with after.",
		Errors: []int{http.StatusUnauthorized, http.StatusNotFound}},
		func(ctx context.Context, in *inboxInput) (*inboxOutput, error) {
			p, err := a.family(ctx, in.FamilyID, anyMember)
			if err != nil {
				return nil, err
			}
			limit := in.Limit
			if limit == 0 {
				limit = 50
			}
			items, err := a.cfg.Inbox.List(ctx, notify.Query{FamilyID: in.FamilyID, Viewer: viewer(p), Before: in.Before,
				After: in.After, Limit: limit, Unread: in.Unread})
			if err != nil {
				return nil, a.problem(ctx, err, "query")
			}
			out := &inboxOutput{}
			out.Body.Items = nonNil(items)
			if in.After == 0 && len(items) == limit {
				out.Body.NextBefore = items[len(items)-1].ID
			}
			return out, nil
		})

	huma.Register(a.api, huma.Operation{OperationID: "read-notification", Method: http.MethodPost,
		Path: "/families/{familyId}/notifications/{notificationId}/read", Summary: "Mark a notification read", Tags: tags,
		Description: "Marks one of the caller's visible notifications read, for the caller only; marking it again is a no-op.",
		Security:    secured(), DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusUnauthorized, http.StatusNotFound}},
		func(ctx context.Context, in *readInput) (*struct{}, error) {
			p, err := a.family(ctx, in.FamilyID, anyMember)
			if err != nil {
				return nil, err
			}
			if err := a.cfg.Inbox.MarkRead(ctx, in.FamilyID, viewer(p), in.NotificationID, a.now()); err != nil {
				return nil, a.problem(ctx, err, "path.notificationId")
			}
			return nil, nil
		})

	sse.Register(a.api, huma.Operation{OperationID: streamOperation, Method: http.MethodGet,
		Path: "/families/{familyId}/notifications/stream", Summary: "Live notifications (SSE)", Tags: tags, Security: secured(),
		Description: "Server-sent events: `notification` events carry the inbox row id as the SSE id; on reconnect, " +
			"Last-Event-ID replays what was missed from the inbox before the live events. A `ping` event is sent at once " +
			"and then periodically. The stream ends when the access that opened it ends: the access token expires, " +
			"the member is removed, the role changes, the session is logged out or revoked; reconnect with a fresh token. " +
			"An API instance holds at most 5 streams per session and 10 per member (by default; DPCS_STREAMS_PER_SESSION, " +
			"DPCS_STREAMS_PER_MEMBER): one more is 429, saying which; when the instance holds as many streams as it may " +
			"(DPCS_STREAMS_MAX) the answer is 503 with Retry-After.",
		Errors: []int{http.StatusUnauthorized, http.StatusNotFound, http.StatusTooManyRequests, http.StatusServiceUnavailable}},
		map[string]any{notify.EventName: notify.Notification{}, "ping": Ping{}},
		a.stream)
}

const streamOperation = "stream-notifications"

// streamRetryAfter is the Retry-After of a stream the instance has no room
// for: about the longest wait of the family app's reconnect backoff.
const streamRetryAfter = 15 * time.Second

type liveStreamKey struct{}

// gateStream runs the SSE stream (next) behind its checks, in the
// middleware, before huma commits the 200: a stream handler can no longer
// answer with an error. The caller must see the family; the stream is
// registered within Config.Streams (429 over the session's or the member's
// bound, 503 with Retry-After over the instance's) before the handler runs
// and unregistered when it returns, whatever it answered.
func (a *Server) gateStream(ctx huma.Context, p Principal, next func(huma.Context)) {
	if !a.streamAuthz(ctx, p) {
		return
	}
	live, closeLive, err := a.streams.open(p.ID, p.session)
	if err != nil {
		status := http.StatusTooManyRequests
		if le := (*streamLimitError)(nil); errors.As(err, &le) && le.Of == "instance" {
			status = http.StatusServiceUnavailable
			ctx.SetHeader("Retry-After", retryAfter(streamRetryAfter))
		}
		huma.WriteErr(a.api, ctx, status, err.Error())
		return
	}
	defer closeLive()
	next(huma.WithValue(huma.WithValue(ctx, principalKey{}, p), liveStreamKey{}, live))
}

// streamAuthz authorizes the SSE stream: false when it answered.
func (a *Server) streamAuthz(ctx huma.Context, p Principal) bool {
	fid, err := strconv.ParseInt(ctx.Param("familyId"), 10, 64)
	if err != nil || fid <= 0 {
		return true // huma's validation answers
	}
	c := context.WithValue(ctx.Context(), principalKey{}, p)
	if _, err = a.family(c, fid, anyMember); err == nil {
		_, err = a.cfg.Store.GetFamily(c, fid)
	}
	if err == nil {
		return true
	}
	var se huma.StatusError
	if !errors.As(a.problem(c, err, "path.familyId"), &se) {
		se = huma.Error500InternalServerError("internal error")
	}
	huma.WriteErr(a.api, ctx, se.GetStatus(), se.Error())
	return false
}

// stream sends the notifications after Last-Event-ID from the inbox, then
// the live ones of the hub (subscribed first, so nothing falls between the
// two; ids already sent are skipped), with a ping at once and every
// PingInterval.
//
// The stream lasts as long as the access that opened it: it ends when the
// access token expires, and when a re-check finds its member removed, its
// role or family changed or its session ended. A re-check runs at every
// ping and whenever an access.Event concerns the stream; the stream is
// registered for those before its first re-check, so a change committed
// while it opened is not missed either.
func (a *Server) stream(ctx context.Context, in *streamInput, send sse.Sender) {
	p, _ := principalFrom(ctx)
	live, ok := ctx.Value(liveStreamKey{}).(*liveStream) // registered by gateStream
	if !ok {
		a.log.ErrorContext(ctx, "api: a stream without its registration; ended")
		return
	}
	if !a.streamAccess(ctx, p) {
		return
	}
	expiry := time.NewTimer(p.expires.Sub(a.now()))
	defer expiry.Stop()
	sub, err := a.cfg.Hub.Subscribe(in.FamilyID, viewer(p))
	if err != nil {
		a.log.WarnContext(ctx, "api: subscribe", "family", in.FamilyID, "err", err)
		return
	}
	defer sub.Close()
	last := in.LastEventID
	if last > 0 {
		for {
			items, err := a.cfg.Inbox.List(ctx, notify.Query{FamilyID: in.FamilyID, Viewer: viewer(p), After: last, Limit: 500})
			if err != nil {
				a.log.WarnContext(ctx, "api: stream resume", "family", in.FamilyID, "err", err)
				return
			}
			for _, n := range items {
				if send(sse.Message{ID: int(n.ID), Data: n}) != nil {
					return
				}
				last = n.ID
			}
			if len(items) < 500 {
				break
			}
		}
	}
	if send(sse.Message{Data: Ping{At: a.now()}}) != nil {
		return
	}
	tick := time.NewTicker(a.cfg.PingInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-sub.C:
			if !ok {
				return // hub closed or we fell behind: the client reconnects with Last-Event-ID
			}
			if m.ID != 0 && m.ID <= last {
				continue
			}
			if send(sse.Message{ID: int(m.ID), Data: m.Data}) != nil {
				return
			}
			if m.ID > last {
				last = m.ID
			}
		case <-tick.C:
			if !a.streamAccess(ctx, p) || send(sse.Message{Data: Ping{At: a.now()}}) != nil {
				return
			}
		case <-live.recheck:
			if !a.streamAccess(ctx, p) {
				return
			}
		case <-expiry.C:
			return // the client reconnects with a fresh token
		}
	}
}

// streamAccess reports whether the access that opened a stream still holds:
// its token has not expired, its member is neither removed nor of another
// family or role, its session is live. A store failure keeps the stream
// (its token's expiry still ends it): ending every stream while the store is
// down would only have them reconnect into 503s.
func (a *Server) streamAccess(ctx context.Context, p Principal) bool {
	if !a.now().Before(p.expires) {
		return false
	}
	m, live, err := a.cfg.Store.MemberSession(ctx, p.ID, p.session)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		if ctx.Err() == nil {
			a.log.WarnContext(ctx, "api: stream access re-check failed; the stream goes on", "member", p.ID, "err", err)
		}
		return true
	}
	return err == nil && live && m.DeletedAt == nil && m.FamilyID == p.FamilyID && m.Role == p.Role
}
