package kafkaops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// DeadLetter is a record of a dead-letter topic, with where it came from
// and why (the dlt-* headers kafkarecord.DeadLetter sets).
type DeadLetter struct {
	TopicPartition
	Offset int64
	Time   time.Time
	Key    []byte
	Value  []byte
	// Headers are the record's headers, the dlt-* ones included.
	Headers []kgo.RecordHeader
	// Reason is why it was dead-lettered; Origin, OriginPartition and
	// OriginOffset where it was read from; Channel the notify channel whose
	// delivery failed ("" for the other DLTs).
	Reason          string
	Origin          string
	OriginPartition int32
	OriginOffset    int64
	Channel         string
}

// DeadLetterQuery selects dead-letter records, newest first.
type DeadLetterQuery struct {
	// Topics are the DLTs to read (each envelope.DLT of a DPCS topic).
	Topics []string
	// Limit is the most records returned.
	Limit int
	// Before, when not nil, is where the page starts: per partition, the
	// offset below which records are read (a partition missing from it is
	// read out). nil: from the newest record.
	Before map[TopicPartition]int64
}

// DeadLetterPage is a page of dead-letter records, newest first.
type DeadLetterPage struct {
	Records []DeadLetter
	// Next is the Before of the next (older) page; nil on the last page.
	Next map[TopicPartition]int64
}

// ErrDeadLetterNotFound is the error of BackOffice.Get for a record that
// does not exist (or is no longer retained).
var ErrDeadLetterNotFound = errors.New("kafkaops: dead-letter record not found")

// BackOffice reads and replays dead letters and counts lags and records
// over franz-go (backoffice.DeadLetters and backoffice.KafkaStats). Close
// it after the API that uses it.
type BackOffice struct {
	cl   *kgo.Client
	adm  *kadm.Client
	opts []kgo.Opt
	wait time.Duration
}

// New returns the dead-letter browser and Kafka statistics of
// the back office. opts connect to the cluster (seed brokers, TLS, SASL): a
// client made from them produces replays, each to the partition its record
// was read from, and asks the brokers for offsets and lags; short-lived
// consumers made from them read records.
func New(opts ...kgo.Opt) (*BackOffice, error) {
	cl, err := kgo.NewClient(slices.Concat(opts, []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())})...)
	if err != nil {
		return nil, fmt.Errorf("kafkaops: back office kafka client: %w", err)
	}
	return &BackOffice{cl: cl, adm: kadm.NewClient(cl), opts: opts, wait: time.Second}, nil
}

// Close closes the client (after in-flight replays).
func (k *BackOffice) Close() { k.cl.Close() }

// offsets returns the start and end offsets of topics' partitions.
func (k *BackOffice) offsets(ctx context.Context, topics []string) (start, end map[TopicPartition]int64, err error) {
	ls, err := k.adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafkaops: dead letters: start offsets: %w", err)
	}
	le, err := k.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafkaops: dead letters: end offsets: %w", err)
	}
	flat := func(l kadm.ListedOffsets) map[TopicPartition]int64 {
		out := map[TopicPartition]int64{}
		for t, ps := range l {
			for p, o := range ps {
				if o.Err == nil && p >= 0 {
					out[TopicPartition{t, p}] = o.Offset
				}
			}
		}
		return out
	}
	return flat(ls), flat(le), nil
}

// read returns the records of each partition in [from[tp], to[tp]).
func (k *BackOffice) read(ctx context.Context, from, to map[TopicPartition]int64) ([]*kgo.Record, error) {
	if len(from) == 0 {
		return nil, nil
	}
	parts := map[string]map[int32]kgo.Offset{}
	pending := map[TopicPartition]bool{}
	for tp, o := range from {
		if parts[tp.Topic] == nil {
			parts[tp.Topic] = map[int32]kgo.Offset{}
		}
		parts[tp.Topic][tp.Partition] = kgo.NewOffset().At(o)
		pending[tp] = true
	}
	cl, err := kgo.NewClient(slices.Concat(k.opts, []kgo.Opt{kgo.ConsumePartitions(parts),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.FetchMaxWait(k.wait / 2)})...)
	if err != nil {
		return nil, fmt.Errorf("kafkaops: dead letters: %w", err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(pending) > 0 {
		// A poll that brings nothing for a whole wait means the rest of
		// the range holds no records (transaction markers, compaction).
		pctx, cancel := context.WithTimeout(ctx, k.wait)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		got := false
		fs.EachError(func(t string, p int32, e error) {
			if !errors.Is(e, context.DeadlineExceeded) && !errors.Is(e, context.Canceled) && err == nil {
				err = fmt.Errorf("kafkaops: dead letters: read %s/%d: %w", t, p, e)
			}
		})
		if err != nil {
			return nil, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			tp := TopicPartition{r.Topic, r.Partition}
			if !pending[tp] || r.Offset >= to[tp] {
				return
			}
			got = true
			out = append(out, r)
			if r.Offset >= to[tp]-1 {
				delete(pending, tp)
			}
		})
		if !got {
			break
		}
	}
	return out, nil
}

// List returns a page of q.Topics' records, newest first: it reads at most q.Limit records back from
// each partition's position and keeps the newest q.Limit of them.
func (k *BackOffice) List(ctx context.Context, q DeadLetterQuery) (DeadLetterPage, error) {
	if q.Limit <= 0 {
		return DeadLetterPage{}, errors.New("kafkaops: dead letters: limit must be > 0")
	}
	start, end, err := k.offsets(ctx, q.Topics)
	if err != nil {
		return DeadLetterPage{}, err
	}
	from, to := map[TopicPartition]int64{}, map[TopicPartition]int64{}
	for tp, hi := range end {
		if q.Before != nil {
			b, ok := q.Before[tp]
			if !ok {
				continue
			}
			hi = min(hi, b)
		}
		if lo := max(start[tp], hi-int64(q.Limit)); lo < hi {
			from[tp], to[tp] = lo, hi
		}
	}
	recs, err := k.read(ctx, from, to)
	if err != nil {
		return DeadLetterPage{}, err
	}
	slices.SortFunc(recs, func(a, b *kgo.Record) int {
		return cmp.Or(b.Timestamp.Compare(a.Timestamp), strings.Compare(a.Topic, b.Topic),
			cmp.Compare(a.Partition, b.Partition), cmp.Compare(b.Offset, a.Offset))
	})
	recs = recs[:min(len(recs), q.Limit)]
	// The next page starts below the oldest record taken from each
	// partition; partitions nothing was taken from start where they did.
	next := map[TopicPartition]int64{}
	for tp, hi := range to {
		next[tp] = hi
	}
	page := DeadLetterPage{Records: make([]DeadLetter, 0, len(recs))}
	for _, r := range recs {
		tp := TopicPartition{r.Topic, r.Partition}
		next[tp] = min(next[tp], r.Offset)
		page.Records = append(page.Records, deadLetter(r))
	}
	for tp, o := range next {
		if o <= start[tp] {
			delete(next, tp)
		}
	}
	if len(next) > 0 {
		page.Next = next
	}
	return page, nil
}

// Get returns the record at offset of the DLT partition, or
// ErrDeadLetterNotFound.
func (k *BackOffice) Get(ctx context.Context, tp TopicPartition, offset int64) (DeadLetter, error) {
	start, end, err := k.offsets(ctx, []string{tp.Topic})
	if err != nil {
		return DeadLetter{}, err
	}
	if e, ok := end[tp]; !ok || offset < start[tp] || offset >= e {
		return DeadLetter{}, ErrDeadLetterNotFound
	}
	recs, err := k.read(ctx, map[TopicPartition]int64{tp: offset}, map[TopicPartition]int64{tp: offset + 1})
	if err != nil {
		return DeadLetter{}, err
	}
	for _, r := range recs {
		if r.Offset == offset {
			return deadLetter(r), nil
		}
	}
	return DeadLetter{}, ErrDeadLetterNotFound
}

// Replay produces d back to d.Origin without its dlt-* headers: the
// record goes back to the partition it was read from (keys are
// co-partitioned by family), with a replayed-from header naming the
// dead-letter record.
func (k *BackOffice) Replay(ctx context.Context, d DeadLetter) error {
	if d.Origin == "" || d.OriginPartition < 0 {
		return errors.New("kafkaops: dead letters: the record names no origin topic or partition")
	}
	r := &kgo.Record{Topic: d.Origin, Partition: d.OriginPartition, Key: d.Key, Value: d.Value}
	for _, h := range d.Headers {
		if !strings.HasPrefix(h.Key, "dlt-") && h.Key != HeaderReplayedFrom {
			r.Headers = append(r.Headers, h)
		}
	}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderReplayedFrom,
		Value: []byte(d.Topic + "/" + strconv.FormatInt(int64(d.Partition), 10) + "/" + strconv.FormatInt(d.Offset, 10))})
	if err := k.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("kafkaops: dead letters: replay to %s: %w", d.Origin, err)
	}
	return nil
}

// Lag returns each group's lag (records not yet committed) per topic.
func (k *BackOffice) Lag(ctx context.Context, groups ...string) (map[string]map[string]int64, error) {
	lags, err := k.adm.Lag(ctx, groups...)
	if err != nil {
		return nil, fmt.Errorf("kafkaops: lag: %w", err)
	}
	out := map[string]map[string]int64{}
	for g, l := range lags {
		if l.Error() != nil {
			continue
		}
		out[g] = map[string]int64{}
		for t, tl := range l.Lag.TotalByTopic() {
			out[g][t] = tl.Lag
		}
	}
	return out, nil
}

// Records returns how many records each topic holds.
func (k *BackOffice) Records(ctx context.Context, topics ...string) (map[string]int64, error) {
	start, end, err := k.offsets(ctx, topics)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, t := range topics {
		out[t] = 0
	}
	for tp, e := range end {
		out[tp.Topic] += max(0, e-start[tp])
	}
	return out, nil
}

func deadLetter(r *kgo.Record) DeadLetter {
	d := DeadLetter{TopicPartition: TopicPartition{r.Topic, r.Partition}, Offset: r.Offset, Time: r.Timestamp,
		Key: r.Key, Value: r.Value, Headers: r.Headers, OriginPartition: -1, OriginOffset: -1}
	for _, h := range r.Headers {
		switch h.Key {
		case kafkarecord.HeaderDLTReason:
			d.Reason = string(h.Value)
		case kafkarecord.HeaderDLTTopic:
			d.Origin = string(h.Value)
		case kafkarecord.HeaderDLTPartition:
			if p, err := strconv.ParseInt(string(h.Value), 10, 32); err == nil {
				d.OriginPartition = int32(p)
			}
		case kafkarecord.HeaderDLTOffset:
			if o, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
				d.OriginOffset = o
			}
		case headerDLTChannel:
			d.Channel = string(h.Value)
		}
	}
	return d
}

// headerDLTChannel is notify.HeaderDLTChannel: the channel whose delivery
// failed (TestBackOffice holds them equal; this package does not link the
// notifier).
const headerDLTChannel = "dlt-channel"

// DeadLetterTopics are the DLTs of the DPCS topics, in Topics' order.
func DeadLetterTopics() []string {
	var out []string
	for _, t := range envelope.Topics() {
		if strings.HasSuffix(t, envelope.DLT("")) {
			out = append(out, t)
		}
	}
	return out
}

// HeaderReplayedFrom is set on a record replayed from a DLT:
// "<dlt topic>/<partition>/<offset>".
const HeaderReplayedFrom = "replayed-from"
