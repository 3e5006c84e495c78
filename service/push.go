package service

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/service/store"
)

// PushChannelName is the Web Push channel's name in the notifier (hooks,
// metrics, the dlt-channel header of its dead letters).
const PushChannelName = "webpush"

// DefaultVAPIDSubject is the all-in-one's VAPID subject when
// DPCS_VAPID_SUBJECT is not set. Push services may refuse a subject they
// cannot reach: a deployment sets its own.
const DefaultVAPIDSubject = "mailto:dpcs@localhost"

// checkPush validates the Web Push variables: both keys or neither, a
// matching pair, a subject with them, a push timeout, a cap of
// subscriptions, known-looking kinds.
func (c Config) checkPush() []error {
	var errs []error
	switch {
	case (c.VAPIDPublicKey == "") != (c.VAPIDPrivateKey == ""):
		errs = append(errs, errors.New("DPCS_VAPID_PUBLIC_KEY, DPCS_VAPID_PRIVATE_KEY: set both or neither"))
	case c.VAPIDPublicKey != "":
		if err := (notify.VAPIDKeys{Public: c.VAPIDPublicKey, Private: c.VAPIDPrivateKey}).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("DPCS_VAPID_PRIVATE_KEY: not a P-256 key pair with DPCS_VAPID_PUBLIC_KEY (make one with server vapid-keys): %w", err))
		}
	}
	if s := c.VAPIDSubject; s != "" && !strings.HasPrefix(s, "mailto:") && !strings.HasPrefix(s, "https://") {
		errs = append(errs, fmt.Errorf("DPCS_VAPID_SUBJECT: want a mailto: or https: URI, got %q", s))
	}
	if c.PushTimeout < 100*time.Millisecond || c.PushTimeout > time.Minute {
		errs = append(errs, fmt.Errorf("DPCS_PUSH_TIMEOUT: want 100ms to 1m, got %s", c.PushTimeout))
	}
	if c.PushMaxSubscriptions < 1 || c.PushMaxSubscriptions > 100 {
		errs = append(errs, fmt.Errorf("DPCS_PUSH_MAX_SUBSCRIPTIONS: want 1 to 100, got %d", c.PushMaxSubscriptions))
	}
	for _, k := range c.PushKinds {
		if k == "" || strings.ToUpper(k) != k || strings.ContainsAny(k, " ,") {
			errs = append(errs, fmt.Errorf("DPCS_PUSH_KINDS: %q is not a notification kind (CUSTOMER_BLOCKED, THRESHOLD_ALERT, …)", k))
		}
	}
	return errs
}

// pushKinds are the configured kinds, or notify's defaults.
func (c Config) pushKinds() []envelope.SubType {
	if len(c.PushKinds) == 0 {
		return notify.DefaultWebPushKinds()
	}
	out := make([]envelope.SubType, len(c.PushKinds))
	for i, k := range c.PushKinds {
		out[i] = envelope.SubType(k)
	}
	return out
}

// Pushes reports whether notifications of kind k are sent as Web Push
// messages (DPCS_PUSH_KINDS).
func (c Config) Pushes(k envelope.SubType) bool { return slices.Contains(c.pushKinds(), k) }

// VAPIDKeys returns the configured VAPID key pair; ok is false when none is
// configured.
func (c Config) VAPIDKeys() (keys notify.VAPIDKeys, ok bool) {
	if c.VAPIDPublicKey == "" || c.VAPIDPrivateKey == "" {
		return notify.VAPIDKeys{}, false
	}
	return notify.VAPIDKeys{Public: c.VAPIDPublicKey, Private: c.VAPIDPrivateKey}, true
}

// WebPushOptions are the notifier options of the Web Push channel on a split
// deployable (processor, server): the channel reading subscriptions from
// db, when DPCS_VAPID_PUBLIC_KEY, DPCS_VAPID_PRIVATE_KEY and
// DPCS_VAPID_SUBJECT are set. Without them, none, and one INFO line says
// push is off.
func (c Config) WebPushOptions(db *sql.DB, log *slog.Logger) ([]notify.Option, error) {
	o, _, err := c.WebPush(db, log)
	if err != nil || o == nil {
		return nil, err
	}
	return []notify.Option{o}, nil
}

// WebPush is WebPushOptions' channel and option: the option for the
// notifier and the channel itself, for what sends without a notifier (the
// weekly summaries). Both nil when push is off.
func (c Config) WebPush(db *sql.DB, log *slog.Logger) (notify.Option, *notify.WebPush, error) {
	keys, ok := c.VAPIDKeys()
	if !ok {
		log.Info("web push off: set DPCS_VAPID_PUBLIC_KEY, DPCS_VAPID_PRIVATE_KEY and DPCS_VAPID_SUBJECT to send pushes (server vapid-keys makes a pair)")
		return nil, nil, nil
	}
	if c.VAPIDSubject == "" {
		return nil, nil, errors.New("DPCS_VAPID_SUBJECT: required with the VAPID keys (mailto: or https:)")
	}
	st, err := store.New(db, store.WithLocation(c.Zone), store.WithLogger(log))
	if err != nil {
		return nil, nil, err
	}
	return c.webPushOption(st, keys, c.VAPIDSubject, log)
}

func (c Config) webPushOption(subs notify.SubscriptionStore, keys notify.VAPIDKeys, subject string, log *slog.Logger,
	opts ...notify.WebPushOption) (notify.Option, *notify.WebPush, error) {
	wp, err := notify.NewWebPush(subs, keys, subject,
		append([]notify.WebPushOption{notify.WithPushLogger(log), notify.WithPushTimeout(c.PushTimeout)}, opts...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("web push: %w", err)
	}
	log.Info("web push on", "kinds", c.pushKinds(), "publicKey", keys.Public)
	return notify.WithChannel(PushChannelName, wp, c.pushKinds()...), wp, nil
}

// systemPush is the all-in-one's Web Push: the configured keys, or a pair
// generated once and kept in st, so browsers' subscriptions (made for the
// public key) survive restarts.
func (c SystemConfig) systemPush(ctx context.Context, st *store.Store, log *slog.Logger) (notify.Option, *notify.WebPush, string, error) {
	keys, ok := c.VAPIDKeys()
	if !ok {
		stored, err := st.VAPIDKeys(ctx, func() (store.VAPIDKeys, error) {
			k, err := notify.GenerateVAPIDKeys()
			return store.VAPIDKeys(k), err
		})
		if err != nil {
			return nil, nil, "", err
		}
		keys = notify.VAPIDKeys(stored)
	}
	subject := c.VAPIDSubject
	if subject == "" {
		subject = DefaultVAPIDSubject
	}
	var opts []notify.WebPushOption
	if c.AllowLoopbackPush { // tests: a local push service; the guard still refuses the rest
		opts = append(opts, notify.WithPushLoopback())
	}
	o, wp, err := c.webPushOption(st, keys, subject, log, opts...)
	return o, wp, keys.Public, err
}
