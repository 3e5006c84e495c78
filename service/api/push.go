package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/service/store"
)

// VAPIDPublicKey is the application server key browsers subscribe with.
type VAPIDPublicKey struct {
	PublicKey string `json:"publicKey" doc:"The VAPID public key (uncompressed P-256 point, base64url without padding): pushManager.subscribe's applicationServerKey"`
}

type vapidKeyOutput struct {
	Body VAPIDPublicKey
}

// PushKeys are a browser subscription's keys (PushSubscription.toJSON().keys).
type PushKeys struct {
	P256dh string `json:"p256dh" minLength:"86" maxLength:"88" doc:"The browser's P-256 public key, base64url (65 bytes)"`
	Auth   string `json:"auth" minLength:"22" maxLength:"24" doc:"The browser's authentication secret, base64url (16 bytes)"`
}

// PushSubscriptionBody is the browser's PushSubscription as
// PushSubscription.toJSON() writes it.
type PushSubscriptionBody struct {
	Endpoint       string   `json:"endpoint" minLength:"1" maxLength:"2048" doc:"The push service URL (https)"`
	ExpirationTime *float64 `json:"expirationTime,omitempty" nullable:"true" required:"false" doc:"As the browser sends it (ignored)"`
	Keys           PushKeys `json:"keys"`
}

type pushSubscribeInput struct {
	FamilyPath
	Body PushSubscriptionBody
}

// PushSubscriptionView is a stored subscription (without its keys).
type PushSubscriptionView struct {
	MemberID int64  `json:"memberId" doc:"The caller: pushes go to the member who subscribed"`
	Endpoint string `json:"endpoint"`
}

type pushSubscriptionOutput struct {
	Body PushSubscriptionView
}

// DefaultMaxPushSubscriptions is Config.MaxPushSubscriptions' default: a
// member's phones and computers, with room to spare, while every
// subscription of a family costs a request per push.
const DefaultMaxPushSubscriptions = 10

// maxPushSubscriptions is the configured cap, or its default.
func (a *Server) maxPushSubscriptions() int {
	if a.cfg.MaxPushSubscriptions > 0 {
		return a.cfg.MaxPushSubscriptions
	}
	return DefaultMaxPushSubscriptions
}

type pushSubscriptionsOutput struct {
	Body []PushSubscriptionView
}

type pushUnsubscribeInput struct {
	FamilyPath
	Endpoint string `query:"endpoint" required:"true" minLength:"1" maxLength:"2048" doc:"The subscription's endpoint (URL-encoded)"`
}

// pushCaller authorizes a push subscription route: the caller's own
// subscriptions in its own family (404 for another family, as everywhere);
// an ADMIN has no member in a family to push to (403).
func (a *Server) pushCaller(ctx context.Context, fid int64) (Principal, error) {
	p, err := a.family(ctx, fid, anyMember)
	if err != nil {
		return p, err
	}
	if p.Role.BackOffice() {
		return p, huma.Error403Forbidden("push subscriptions belong to a family's members: the back office has none")
	}
	return p, nil
}

func (a *Server) registerPush() {
	tags := []string{notificationsTag}
	huma.Register(a.api, huma.Operation{OperationID: "get-vapid-public-key", Method: http.MethodGet,
		Path: "/push/vapid-public-key", Summary: "The Web Push application server key", Tags: tags, Security: public(),
		Description: "The VAPID public key to subscribe with (`pushManager.subscribe({userVisibleOnly: true, " +
			"applicationServerKey})`). 404 when this server does not send pushes.",
		Errors: []int{http.StatusNotFound}},
		func(ctx context.Context, _ *struct{}) (*vapidKeyOutput, error) {
			if a.cfg.VAPIDPublicKey == "" {
				return nil, huma.Error404NotFound("web push is not enabled on this server")
			}
			return &vapidKeyOutput{Body: VAPIDPublicKey{PublicKey: a.cfg.VAPIDPublicKey}}, nil
		})

	huma.Register(a.api, huma.Operation{OperationID: "create-push-subscription", Method: http.MethodPost,
		Path: "/families/{familyId}/push-subscriptions", Summary: "Subscribe this browser to pushes", Tags: tags,
		Security: secured(), DefaultStatus: http.StatusCreated,
		Description: "Stores the browser's PushSubscription (its toJSON()) for the caller: pushes of the notifications " +
			"the caller sees (CUSTOMER_BLOCKED, THRESHOLD_ALERT, data requests and answers) go to it, encrypted for it. " +
			"The endpoint must be https on port 443 of a public host: an address literal in a private or other " +
			"special-purpose range in any spelling (127.1, 0x7f000001, 2130706433, 169.254.169.254.), or localhost, is refused (422). " +
			"The endpoint is stored and answered in one spelling (host in lower case, no trailing dot, no default port): " +
			"subscribing again with the same endpoint, however spelled, replaces its keys. An endpoint belongs to the member who subscribed it: another member's is refused (409) and stays " +
			"theirs (a browser shared by two logins unsubscribes, then subscribes again for a new endpoint). A member " +
			"has at most a configured number of subscriptions (10 by default): a new endpoint beyond it is refused " +
			"(409) until one is deleted. Subscriptions the push service reports gone are removed, as are a removed " +
			"member's. ADMIN accounts cannot subscribe (403).",
		Errors: []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity}},
		func(ctx context.Context, in *pushSubscribeInput) (*pushSubscriptionOutput, error) {
			p, err := a.pushCaller(ctx, in.FamilyID)
			if err != nil {
				return nil, err
			}
			s, err := a.cfg.Store.SavePushSubscription(ctx, in.FamilyID, p.ID, notify.PushSubscription{Endpoint: in.Body.Endpoint,
				P256dh: in.Body.Keys.P256dh, Auth: in.Body.Keys.Auth},
				store.PushRules{Max: a.maxPushSubscriptions(), AllowLoopback: a.cfg.AllowLoopbackPush})
			if err != nil {
				return nil, a.problem(ctx, err, "body")
			}
			return &pushSubscriptionOutput{Body: PushSubscriptionView{MemberID: s.MemberID, Endpoint: s.Endpoint}}, nil
		})

	huma.Register(a.api, huma.Operation{OperationID: "list-push-subscriptions", Method: http.MethodGet,
		Path: "/families/{familyId}/push-subscriptions", Summary: "The caller's push subscriptions", Tags: tags,
		Security: secured(),
		Description: "The caller's own subscriptions (endpoints, oldest first, without their keys): what counts " +
			"towards the cap, and what DELETE takes.",
		Errors: []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound}},
		func(ctx context.Context, in *FamilyPath) (*pushSubscriptionsOutput, error) {
			p, err := a.pushCaller(ctx, in.FamilyID)
			if err != nil {
				return nil, err
			}
			subs, err := a.cfg.Store.PushSubscriptions(ctx, p.ID)
			if err != nil {
				return nil, a.problem(ctx, err, "")
			}
			out := make([]PushSubscriptionView, len(subs))
			for i, s := range subs {
				out[i] = PushSubscriptionView{MemberID: s.MemberID, Endpoint: s.Endpoint}
			}
			return &pushSubscriptionsOutput{Body: out}, nil
		})

	huma.Register(a.api, huma.Operation{OperationID: "delete-push-subscription", Method: http.MethodDelete,
		Path: "/families/{familyId}/push-subscriptions", Summary: "Unsubscribe a browser", Tags: tags,
		Security: secured(), DefaultStatus: http.StatusNoContent,
		Description: "Deletes the caller's subscription with this endpoint (after PushSubscription.unsubscribe()). " +
			"404 when the caller has none with it.",
		Errors: []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusUnprocessableEntity}},
		func(ctx context.Context, in *pushUnsubscribeInput) (*struct{}, error) {
			p, err := a.pushCaller(ctx, in.FamilyID)
			if err != nil {
				return nil, err
			}
			if err := a.cfg.Store.DeletePushSubscription(ctx, p.ID, in.Endpoint); err != nil {
				return nil, a.problem(ctx, err, "query.endpoint")
			}
			return nil, nil
		})
}
