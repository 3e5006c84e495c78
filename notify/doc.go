// Package notify delivers DPCS notifications (doc/architecture.md,
// "Notifications"): QUOTA_UPDATED, CUSTOMER_BLOCKED and THRESHOLD_ALERT events
// from the notification-events topic, and the QUOTA_UPDATED and
// CUSTOMER_BLOCKED a decision's usage-persist record stands for
// (doc/wire-format.md, "One record per decision"), go to a member's inbox,
// to live subscribers (SSE) and to external channels (web push, webhooks);
// so do the API's: a member's request for more data and its answer
// (DATA_REQUESTED, DATA_REQUEST_ANSWERED) and a gift, told to the receiver
// and to the giver (DATA_GIFTED, each pushed to that member only).
//
// # Pieces
//
//   - Notifier: the consumer (group notification-group). For each poll it
//     dedupes, stores the notifications in the inbox, publishes them to the
//     Hub and queues them for the channels; offsets are committed only
//     after that. Malformed records go to notification-events.DLT with a
//     dlt-reason header. A failing inbox pauses fetching and the same poll
//     is retried with backoff; nothing is skipped. The Kafka side — poll,
//     commit, dead letters, pause and backoff, rebalances, the drain on
//     Close — is package envelope/consumer's lifecycle, shared with the
//     write-behind; its options (group, topic, dead-letter topic, poll size,
//     backoff, consumer hooks) are given through WithConsumer.
//   - Store / SQLInbox: the inbox, table notification in MySQL/MariaDB or
//     SQLite (dialects via internal/sqldialect, schema embedded from
//     migrations/). event_id and dedupe_key are UNIQUE; member_id is NULL
//     for family-wide rows; read marks are per viewer (notification_read).
//     List pages newest first (Query.Before) or resumes oldest first
//     (Query.After, an SSE Last-Event-ID); MarkRead marks one row read.
//   - Hub: in-process fan-out per family. Subscribe with a Filter (member
//     id, role): owners see every notification of the family, members the
//     family-wide ones and their own. Each subscription has a bounded
//     buffer; a subscriber that falls behind is dropped (its channel closed,
//     Err = ErrSlowSubscriber) and never blocks the others.
//   - Message: what a subscription receives — the SSE id (the inbox row id),
//     event name EventName and the Notification as JSON data; WriteTo
//     writes one SSE frame.
//   - Channel: external delivery (Send). Webhook POSTs JSON signed with
//     HMAC-SHA256. WebPush sends Web Push messages (RFC 8030) to the
//     browsers of the members who see a notification (a SubscriptionStore
//     names them), encrypted (RFC 8291) and VAPID-signed (RFC 8292); a
//     subscription the push service reports gone (404, 410) is removed; use
//     it with WithChannel(name, wp, DefaultWebPushKinds()...). Both connect
//     through a dial guard (PublicOnlyDialer) that keeps members' endpoints,
//     and webhook redirects, out of the deployment's network. Each channel
//     has its own bounded queue and workers; a failed send is retried after
//     1 s, 5 s and 30 s and then sent to the DLT with the reason (and a
//     dlt-channel header). A full queue dead-letters too, so a failing
//     channel never holds up the inbox, the hub or the other channels.
//     Within a channel the families take turns, one delivery of a family at
//     a time, retries wait off the workers, and a family holds at most its
//     share of the queue (WithChannelFamilyLimit): one family's slow or dead
//     endpoints do not delay another family's notifications.
//   - Text: message texts, Korean by default (the seed's
//     "가족 데이터가 10% 미만입니다! 데이터를 충전해주세요.") and English.
//
// # Exactly once in effect
//
// The processor re-emits byte-identical notification records when it replays
// a usage event, and Kafka redelivers what was not committed. Each
// notification has a dedupe key: its event id, or for a THRESHOLD_ALERT its
// family, threshold and period (ThresholdKey), so a threshold is announced
// once per period even when it arrives under several event ids. An optional
// idempotency guard (WithGuard, e.g. on Redis) answers replays without
// touching the database; the inbox's unique keys are the durable line. A
// notification is published and queued only when the inbox row is its own and
// not yet marked delivered, so a replay never adds a row or a second live
// push. A live-only QUOTA_UPDATED (not stored, see WithStoreQuotaUpdated)
// that no channel takes is not claimed in the guard (two Redis scripts per
// allowed usage event, a third of the quota engine's own cost): the notifier
// remembers the last 65,536 it pushed and drops their duplicates, so only a
// replay reaching another notifier (its partition moved after a crash or a
// rebalance) pushes that snapshot of the pool again. When no subscriber of
// the hub watches its family, such a record is not even decoded: its subType
// header and key (kafkarecord.New's) say what it is and whose, and it is
// reported Unwatched — a garbled value there is not dead-lettered, since
// nothing would have been pushed; whether a record is skipped is decided when
// its poll is first read, not again on the poll's retries. The one window
// left for the rest is a crash after publishing and before the delivered
// mark: the next owner of the partition publishes again (to its own
// subscribers) and channels may see the event twice; they get the event id
// (HeaderEventID) to dedupe.
//
// # Use
//
//	inbox, _ := notify.NewSQLInbox(db)
//	_ = inbox.Migrate(ctx)
//	hub, _ := notify.NewHub()
//	hook, _ := notify.NewWebhook("https://push.example/dpcs", secret)
//	n, _ := notify.New(inbox, hub, []kgo.Opt{kgo.SeedBrokers(brokers...)},
//		notify.WithGuard(guard), notify.WithChannel("webhook", hook),
//		notify.WithConsumer(consumer.WithMaxPoll(1000)))
//	go n.Run(ctx)
//	sub, _ := hub.Subscribe(familyID, notify.Filter{MemberID: me, Role: notify.RoleMember})
//	for m := range sub.C { m.WriteTo(w) } // then sub.Err() says why it ended
//	…
//	n.Close(shutdownCtx) // finishes the poll in hand, lets the channels finish, leaves the group
//	hub.Close(shutdownCtx)
//
// The hub is per process: with several notifier instances, a subscriber
// sees live the notifications consumed by its own process, and every
// notification through the inbox (List with Query.After on reconnect).
//
// # Webhook receivers
//
// A Webhook signs each POST: HeaderSignature is "sha256=" and the hex
// HMAC-SHA256, under the shared secret, of HeaderTimestamp (Unix seconds),
// "." and the raw body. A receiver calls VerifyRequest with the headers, the
// body exactly as read and its clock: it refuses a bad signature and a
// timestamp more than DefaultTolerance (5 min) away either way, so a captured
// request cannot be replayed later (ExampleVerifyRequest). It then dedupes
// on HeaderEventID. Answering 4xx (but 408 and 429) tells the webhook not to
// retry.
//
// Observability is through Hooks (OnNotify, OnDeadLetter, OnRetry, OnSend,
// OnCommit), HubHooks (OnPublish, OnDrop), the consumer's own hooks
// (WithConsumer(consumer.WithHooks(…)): batches, pauses, rebalances) and an
// optional *slog.Logger.
package notify
