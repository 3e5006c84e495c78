package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/writebehind"
)

// tappedTopics are the topics the watcher reads in full: what the processor
// and the outbox relay emit, and every dead-letter topic.
func tappedTopics() []string {
	return []string{envelope.TopicUsagePersist, envelope.TopicNotificationEvents, envelope.TopicPolicyUpdated,
		envelope.DLT(envelope.TopicUsageEvents), envelope.DLT(envelope.TopicPolicyUpdated),
		envelope.DLT(envelope.TopicUsagePersist), envelope.DLT(envelope.TopicNotificationEvents)}
}

// deadLetter is a record some consumer sent to a DLT.
type deadLetter struct {
	topic, eventID, reason string
}

// watcher observes a running DPCS through Kafka, as an operator would: the
// consumer groups' committed offsets against the topics' ends, and every
// record of the tapped topics (read from the start without a group, so it
// never disturbs the system's groups). Safe for concurrent use.
type watcher struct {
	cl  *kgo.Client
	adm *kadm.Client
	tap *kgo.Client

	mu   sync.Mutex               // guards the tap's reads and what they found
	recs map[string][]*kgo.Record // by envelope eventId
	dead []deadLetter
	next map[string]map[int32]int64
}

func newWatcher(t *testing.T, brokers []string) *watcher {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	tap, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(tappedTopics()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tap.Close)
	return &watcher{cl: cl, adm: kadm.NewClient(cl), tap: tap, recs: map[string][]*kgo.Record{}, next: map[string]map[int32]int64{}}
}

// groupTopics are the topics each DPCS consumer group consumes.
func groupTopics() map[string][]string {
	return map[string][]string{
		judge.ProcessorGroup:     judge.ProcessorTopics(),
		writebehind.DefaultGroup: {envelope.TopicUsagePersist},
		notify.DefaultGroup:      notify.Topics(),
	}
}

// behind lists the partitions of topics group has not committed to their
// end ("" when it is caught up) and sums its committed offsets (which only
// grow while the group works).
func (w *watcher) behind(ctx context.Context, group string, topics ...string) (string, int64, error) {
	ends, err := w.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return "", 0, err
	}
	committed, err := w.adm.FetchOffsets(ctx, group)
	if err != nil {
		return "", 0, err
	}
	var lag []string
	var sum int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			lag = append(lag, fmt.Sprintf("%s/%d: %v", o.Topic, o.Partition, o.Err))
			return
		}
		c, ok := committed.Lookup(o.Topic, o.Partition)
		if ok && c.At > 0 {
			sum += c.At
		}
		if o.Offset > 0 && (!ok || c.At < o.Offset) {
			lag = append(lag, fmt.Sprintf("%s/%d committed %d of %d", o.Topic, o.Partition, c.At, o.Offset))
		}
	})
	slices.Sort(lag)
	return strings.Join(lag, ", "), sum, nil
}

// caughtUp waits until each group committed everything in its topics, in
// the order given (upstream first: what the processor emits is then already
// in the notifier's topic), then reads the tapped topics up to their ends.
// Each wait goes on while the group commits (or the tap reads) and fails
// after DefaultStall without progress, saying which partitions lag.
func (w *watcher) caughtUp(ctx context.Context, groups ...string) error {
	for _, g := range groups {
		topics := groupTopics()[g]
		err := Wait{What: fmt.Sprintf("group %s to commit %v to the end", g, topics)}.Until(ctx,
			func(ctx context.Context) (Progress, error) {
				lag, at, err := w.behind(ctx, g, topics...)
				return Progress{Done: err == nil && lag == "", At: at, Seen: lag}, err
			})
		if err != nil {
			return err
		}
	}
	var ends kadm.ListedOffsets
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.read(ctx, "the watcher to read the output topics to their ends", func(ctx context.Context) (bool, string, error) {
		if ends == nil { // once, after the groups caught up; retried until it answers
			l, err := w.adm.ListEndOffsets(ctx, tappedTopics()...)
			if err == nil {
				err = l.Error()
			}
			if err != nil {
				return false, "", err
			}
			ends = l
		}
		var short []string
		ends.Each(func(o kadm.ListedOffset) {
			if at := w.next[o.Topic][o.Partition]; o.Offset > 0 && at < o.Offset {
				short = append(short, fmt.Sprintf("%s/%d read %d of %d", o.Topic, o.Partition, at, o.Offset))
			}
		})
		slices.Sort(short)
		return len(short) == 0, strings.Join(short, ", "), nil
	})
}

// read polls the tapped topics until done says so; what names the wait. It
// goes on while records arrive and fails after DefaultStall without any.
// w.mu is held.
func (w *watcher) read(ctx context.Context, what string, done func(context.Context) (bool, string, error)) error {
	return Wait{What: what, Poll: time.Millisecond}.Until(ctx, func(ctx context.Context) (Progress, error) {
		ok, seen, err := done(ctx)
		if err != nil || ok {
			return Progress{Done: ok, Seen: seen}, err
		}
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		fs := w.tap.PollFetches(pctx)
		cancel()
		fs.EachRecord(w.add)
		var at int64
		for _, ps := range w.next {
			for _, n := range ps {
				at += n
			}
		}
		return Progress{At: at, Seen: seen}, nil
	})
}

func (w *watcher) add(r *kgo.Record) {
	if w.next[r.Topic] == nil {
		w.next[r.Topic] = map[int32]int64{}
	}
	w.next[r.Topic][r.Partition] = r.Offset + 1
	ev, err := kafkarecord.Decode(r)
	if strings.HasSuffix(r.Topic, envelope.DLT("")) {
		id := "(undecodable)"
		if err == nil {
			id = ev.EventID
		}
		var reason string
		for _, h := range r.Headers {
			if h.Key == kafkarecord.HeaderDLTReason {
				reason = string(h.Value)
			}
		}
		w.dead = append(w.dead, deadLetter{topic: r.Topic, eventID: id, reason: reason})
		return
	}
	if err == nil {
		w.recs[ev.EventID] = append(w.recs[ev.EventID], r)
	}
}

// await reads until a record with eventID was emitted (the outbox relay
// publishes policy updates on its own schedule).
func (w *watcher) await(ctx context.Context, eventID string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.read(ctx, "event "+eventID+" on the output topics", func(context.Context) (bool, string, error) {
		return len(w.recs[eventID]) > 0, fmt.Sprintf("records of %d events read, none of %s", len(w.recs), eventID), nil
	})
}

// deadFor returns the reasons records about eventID were dead-lettered.
func (w *watcher) deadFor(eventID string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, d := range w.dead {
		if d.eventID == eventID {
			out = append(out, d.topic+": "+d.reason)
		}
	}
	return out
}

// records returns the records read so far with the envelope id id.
func (w *watcher) records(id string) []*kgo.Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.recs[id])
}

// persisted is the usage-persist records the processor emitted for a usage
// event, one per delivery.
func (w *watcher) persisted(eventID string) []*kgo.Record {
	return w.records(envelope.DerivedID(envelope.PrefixPersist, eventID, "persist"))
}

// deadLetters returns everything dead-lettered so far.
func (w *watcher) deadLetters() []deadLetter {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.dead)
}

// thresholdID is the id of the THRESHOLD_ALERT a usage event emits when it
// crosses pct.
func thresholdID(eventID string, pct int) string {
	return envelope.DerivedID(envelope.PrefixNotification, eventID, fmt.Sprintf("threshold:%d", pct))
}

// crossed lists the thresholds (descending) the processor announced for a
// usage event, and how often each was emitted.
func (w *watcher) crossed(eventID string) (pcts []int, emitted []int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for pct := 99; pct >= 1; pct-- {
		if n := len(w.recs[thresholdID(eventID, pct)]); n > 0 {
			pcts, emitted = append(pcts, pct), append(emitted, n)
		}
	}
	return pcts, emitted
}

// outputsOf lists the ids of every record a judged usage event causes
// downstream, besides threshold alerts.
func outputsOf(eventID string) []string {
	return []string{
		envelope.DerivedID(envelope.PrefixPersist, eventID, "persist"),
		envelope.DerivedID(envelope.PrefixNotification, eventID, "quota-updated"),
		envelope.DerivedID(envelope.PrefixNotification, eventID, "customer-blocked"),
	}
}
