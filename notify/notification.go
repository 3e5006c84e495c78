package notify

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrInvalid is wrapped by every error about bad arguments or options.
	ErrInvalid = errors.New("notify: invalid argument")
	// ErrNotFound is returned by SQLInbox.MarkRead for a notification that
	// does not exist or that the viewer may not see.
	ErrNotFound = errors.New("notify: notification not found")
	// ErrClosed is returned when subscribing to a closed Hub.
	ErrClosed = errors.New("notify: closed")
	// ErrSlowSubscriber is the reason a Subscription was dropped because its
	// buffer was full when a message arrived.
	ErrSlowSubscriber = errors.New("notify: subscriber too slow, buffer full")
	// ErrPermanent marks a channel error that retrying cannot fix (wrap with
	// Permanent): the delivery goes to the dead-letter topic at once.
	ErrPermanent = errors.New("notify: permanent delivery failure")
)

// Role is what a viewer may see of a family's notifications.
type Role string

// The roles of doc/security.md, "Who can do what".
const (
	// RoleMember sees family-wide notifications and their own.
	RoleMember Role = "MEMBER"
	// RoleOwner sees every notification of the family.
	RoleOwner Role = "OWNER"
	// RoleAdmin (back office) sees every notification of the family.
	RoleAdmin Role = "ADMIN"
)

// Filter says who is looking: a live subscriber (Hub.Subscribe) or an inbox
// reader (Query). MemberID is the viewer's customer id; it is required for
// RoleMember and, for any role, is whose read marks are reported.
type Filter struct {
	MemberID int64
	Role     Role
}

func (f Filter) validate() error {
	switch f.Role {
	case RoleMember:
		if f.MemberID <= 0 {
			return fmt.Errorf("%w: a MEMBER filter needs a member id > 0", ErrInvalid)
		}
	case RoleOwner, RoleAdmin:
		if f.MemberID < 0 {
			return fmt.Errorf("%w: negative member id", ErrInvalid)
		}
	default:
		return fmt.Errorf("%w: unknown role %q", ErrInvalid, f.Role)
	}
	return nil
}

// Sees reports whether the viewer may see n: owners and admins see all of
// their family's notifications, members the family-wide ones (MemberID 0)
// and their own, except a DATA_REQUESTED (its MemberID is the member who
// asked) and a WEEKLY_SUMMARY, which are for owners only. The family is
// checked by the caller (Hub, inbox query).
func (f Filter) Sees(n Notification) bool {
	if f.Role == RoleOwner || f.Role == RoleAdmin {
		return true
	}
	return !ownersOnly(n.Kind) && (n.MemberID == 0 || n.MemberID == f.MemberID)
}

// OwnersOnlyKind is the notification kind only owners and admins see: a
// member's request for more data, addressed to the family's owners.
const OwnersOnlyKind = envelope.SubDataRequested

// Notification is one notification as stored in the inbox, pushed to live
// subscribers and handed to channels. Its JSON form is what the HTTP API and
// the SSE stream send.
type Notification struct {
	// ID is the inbox row id (0 before the inbox stored it): increasing, the
	// SSE id a reconnecting client resumes from (Last-Event-ID).
	ID int64 `json:"id"`
	// EventID is the id of the notification event (unique in the inbox).
	EventID  string `json:"eventId"`
	FamilyID int64  `json:"familyId"`
	// MemberID is the member the notification is about; 0 for family-wide
	// notifications (THRESHOLD_ALERT), which every member sees. For
	// DATA_REQUESTED it is the member who asked, and only owners see it;
	// for DATA_GIFTED the member told (the receiver, or the giver).
	MemberID int64            `json:"memberId,omitempty"`
	Kind     envelope.SubType `json:"kind"`
	Title    string           `json:"title"`
	Body     string           `json:"body"`
	// Payload is the event's payload as JSON (the seed's field names).
	Payload json.RawMessage `json:"payload"`
	// CreatedAt is the event's own time.
	CreatedAt time.Time `json:"createdAt"`
	// ReadAt is when the viewer marked it read (inbox queries only).
	ReadAt *time.Time `json:"readAt,omitempty"`

	// DedupeKey is unique in the inbox: "threshold:{family}:{percent}:{period}"
	// for THRESHOLD_ALERT, the event id otherwise.
	DedupeKey string `json:"-"`
	// DeliveredAt is when the notifier handed it to the hub and channels
	// (nil: stored but not yet handed on).
	DeliveredAt *time.Time `json:"-"`
	// MemberName is the display name of the member the texts name (a block,
	// a request for more data), when the notifier knows it (WithNames); the
	// texts say "member <id>" without it. Localized keeps it.
	MemberName string `json:"-"`
	// Apps are the operator's names of the apps the texts name (a block of
	// an app, a request for an app's time), when the notifier knows them
	// (WithApps). Localized keeps them.
	Apps map[string]policy.AppLabel `json:"-"`
}

// ThresholdKey is the dedupe key of a THRESHOLD_ALERT: one per family,
// threshold and period ("YYYY-MM").
func ThresholdKey(familyID int64, percent int, period string) string {
	return "threshold:" + strconv.FormatInt(familyID, 10) + ":" + strconv.Itoa(percent) + ":" + period
}

// FromEvent turns a notification event into a Notification with texts in
// lang. A THRESHOLD_ALERT without a period gets the month of its timestamp
// in loc (nil: UTC).
func FromEvent(e envelope.Envelope[envelope.Notification], lang Lang, loc *time.Location) (Notification, error) {
	if e.Payload == nil {
		return Notification{}, fmt.Errorf("%w: event %q has no payload", ErrInvalid, e.EventID)
	}
	if loc == nil {
		loc = time.UTC
	}
	raw, err := json.Marshal(e.Payload)
	if err != nil {
		return Notification{}, fmt.Errorf("notify: encode payload of %s: %w", e.EventID, err)
	}
	n := Notification{
		EventID:   e.EventID,
		FamilyID:  e.Payload.FamilyKey(),
		Kind:      e.Payload.SubType(),
		Payload:   raw,
		CreatedAt: e.Timestamp.UTC(),
		DedupeKey: e.EventID,
	}
	switch p := e.Payload.(type) {
	case envelope.QuotaUpdated:
		n.MemberID = p.CustomerID
	case envelope.CustomerBlocked:
		n.MemberID = p.CustomerID
	case envelope.DataRequested:
		n.MemberID = p.CustomerID
	case envelope.DataRequestAnswered:
		n.MemberID = p.CustomerID
	case envelope.DataGifted:
		n.MemberID = p.CustomerID
	case envelope.ThresholdAlert:
		period := p.Period
		if period == "" {
			period = e.Timestamp.In(loc).Format("2006-01")
		}
		n.DedupeKey = ThresholdKey(p.FamilyID, p.ThresholdPercent, period)
	}
	n.Title, n.Body = Text(e.Payload, lang)
	return n, nil
}

// Localized returns n with Title and Body rendered again from its payload in
// lang (the inbox keeps the texts of the notifier's language).
func (n Notification) Localized(lang Lang) (Notification, error) {
	var p envelope.Notification
	var err error
	switch n.Kind {
	case envelope.SubQuotaUpdated:
		p, err = unmarshalAs[envelope.QuotaUpdated](n.Payload)
	case envelope.SubCustomerBlocked:
		p, err = unmarshalAs[envelope.CustomerBlocked](n.Payload)
	case envelope.SubThresholdAlert:
		p, err = unmarshalAs[envelope.ThresholdAlert](n.Payload)
	case envelope.SubDataRequested:
		p, err = unmarshalAs[envelope.DataRequested](n.Payload)
	case envelope.SubDataRequestAnswered:
		p, err = unmarshalAs[envelope.DataRequestAnswered](n.Payload)
	case envelope.SubDataGifted:
		p, err = unmarshalAs[envelope.DataGifted](n.Payload)
	case KindWeeklySummary:
		var s WeeklySummary
		if err := json.Unmarshal(n.Payload, &s); err != nil {
			return n, fmt.Errorf("notify: payload of %s: %w", n.EventID, err)
		}
		n.Title, n.Body = weeklyText(s, lang == English)
		return n, nil
	default:
		return n, fmt.Errorf("%w: unknown kind %q", ErrInvalid, n.Kind)
	}
	if err != nil {
		return n, fmt.Errorf("notify: payload of %s: %w", n.EventID, err)
	}
	n.Title, n.Body = TextWith(p, lang, Labels{Member: n.MemberName, Apps: n.Apps})
	return n, nil
}

func unmarshalAs[P envelope.Notification](raw []byte) (envelope.Notification, error) {
	var p P
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, err
	}
	return p, nil
}
