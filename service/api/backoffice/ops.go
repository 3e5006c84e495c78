package backoffice

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/service/api/view"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/kafkaops"
	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/writebehind"
)

// replayTimeout bounds the produce of one replayed record.
const replayTimeout = 10 * time.Second

// MaxDeadLetterPayload is the most bytes of a dead-letter record's value the
// dead-letter browser shows.
const MaxDeadLetterPayload = 16 << 10

// DeadLetterView is a record of a dead-letter topic.
type DeadLetterView struct {
	Topic           string    `json:"topic" example:"usage-events.DLT"`
	Partition       int32     `json:"partition"`
	Offset          int64     `json:"offset"`
	Time            time.Time `json:"time" doc:"When it was dead-lettered (the record's timestamp)"`
	Reason          string    `json:"reason" doc:"Why it could not be processed"`
	OriginTopic     string    `json:"originTopic" doc:"The topic it was read from, where a replay sends it"`
	OriginPartition int32     `json:"originPartition" doc:"-1 when the record does not say"`
	OriginOffset    int64     `json:"originOffset" doc:"-1 when the record does not say"`
	Channel         string    `json:"channel,omitempty" doc:"The notification channel whose delivery failed (notification-events.DLT)"`
	EventType       string    `json:"eventType,omitempty" example:"DATA_USAGE"`
	Key             string    `json:"key,omitempty" doc:"The record's key as text (base64 when it is not UTF-8)"`
	Payload         string    `json:"payload" doc:"The record's value: JSON text (payloadEncoding json or text), or base64 of the bytes"`
	PayloadEncoding string    `json:"payloadEncoding" enum:"json,text,base64"`
	PayloadBytes    int       `json:"payloadBytes" doc:"The value's whole size"`
	Truncated       bool      `json:"truncated,omitempty" doc:"payload holds only the first 16384 bytes"`
	Replayed        *Replayed `json:"replayed,omitempty" doc:"Set once the record was replayed"`
	ReplayedFrom    string    `json:"replayedFrom,omitempty" doc:"When the record is itself a replay that failed again: the dead-letter record it was replayed from, <topic>/<partition>/<offset>"`
}

// Replayed says when and by whom a dead-letter record was replayed.
type Replayed struct {
	At time.Time `json:"at"`
	By int64     `json:"by" doc:"The admin who replayed it"`
}

// DeadLetterList is the answer of GET /admin/dead-letters.
type DeadLetterList struct {
	Records    []DeadLetterView `json:"records" doc:"Newest first"`
	NextBefore string           `json:"nextBefore,omitempty" doc:"The before of the next (older) page; absent on the last page"`
}

// DeadLetterRecord names a dead-letter record.
type DeadLetterRecord struct {
	Topic     string `json:"topic" enum:"usage-events.DLT,policy-updated.DLT,usage-persist.DLT,notification-events.DLT"`
	Partition int32  `json:"partition" minimum:"0"`
	Offset    int64  `json:"offset" minimum:"0"`
}

// DeadLetterSelection is the body of POST /admin/dead-letters/replay.
type DeadLetterSelection struct {
	Records []DeadLetterRecord `json:"records" minItems:"1" maxItems:"100"`
}

// ReplayOutcome is the outcome of replaying one record.
type ReplayOutcome struct {
	DeadLetterRecord
	Status      string    `json:"status" enum:"replayed,already-replayed,not-found,failed" doc:"replayed: produced to its origin now; already-replayed: replayed before (not produced again); not-found: no such record; failed: see error"`
	OriginTopic string    `json:"originTopic,omitempty"`
	Replayed    *Replayed `json:"replayed,omitempty" doc:"This replay, or the earlier one"`
	Error       string    `json:"error,omitempty"`
}

// DeadLetterReplayReport is the answer of POST /admin/dead-letters/replay.
type DeadLetterReplayReport struct {
	Results         []ReplayOutcome `json:"results"`
	Replayed        int             `json:"replayed"`
	AlreadyReplayed int             `json:"alreadyReplayed"`
	Failed          int             `json:"failed" doc:"Records not-found or failed"`
}

// OperationsView is the answer of GET /admin/operations.
type OperationsView struct {
	At            time.Time `json:"at"`
	WindowSeconds float64   `json:"windowSeconds" doc:"The interval the rates are computed over (about 60 s); 0 when this server had no earlier sample: the rates are then absent, ask again"`
	// DecisionsPerSecond are the usage decisions per second by decision
	// code (ALLOWED, BLOCKED_…).
	DecisionsPerSecond   map[string]float64 `json:"decisionsPerSecond" doc:"Usage decisions per second over the window, by decision code"`
	TotalPerSecond       float64            `json:"totalPerSecond" doc:"All decisions per second"`
	RecordsPerSecond     float64            `json:"recordsPerSecond" doc:"Records the processors consumed per second"`
	DeadLettersPerSecond float64            `json:"deadLettersPerSecond" doc:"Records sent to a DLT per second (processor, notifier, write-behind)"`
	// ReportedLag is the sum of the processors' own lag gauges.
	ReportedLag    *float64         `json:"reportedLag,omitempty" doc:"Records left behind the processors' last polls, as they report it (dpcs_processor_lag, summed)"`
	ProcessorLag   map[string]int64 `json:"processorLag,omitempty" doc:"The processor group's lag per topic (records not committed), from Kafka"`
	NotifierLag    map[string]int64 `json:"notifierLag,omitempty" doc:"The notifier group's lag per topic, from Kafka"`
	WriteBehindLag map[string]int64 `json:"writeBehindLag,omitempty" doc:"The write-behind group's lag per topic, from Kafka"`
	DeadLetters    map[string]int64 `json:"deadLetters,omitempty" doc:"Records held by each DLT, from Kafka"`
	RedisStale     *bool            `json:"redisStale,omitempty" doc:"True while judging is paused because the Redis state cannot be trusted; absent when no processor reported"`
	Kafka          string           `json:"kafka" enum:"ok,unavailable,not-configured" doc:"Whether the Kafka figures (lags, DLT records) could be read"`
	Sources        []MetricsSource  `json:"sources" doc:"The metrics sources read"`
}

// MetricsSource is one metrics source of the operations view.
type MetricsSource struct {
	Source string `json:"source" doc:"process (this server's registry) or a scraped URL"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
}

var opsDocs = map[string]string{
	"list-dead-letters": "Records of the dead-letter topics (one, or all four), newest first: where each came from (topic, " +
		"partition, offset), why, its payload (at most 16384 bytes shown) and whether it was replayed; page with before. " +
		"503 when this server has no Kafka client.",
	"replay-dead-letters": "Produces each selected dead-letter record (its key, value and original headers) back to the " +
		"topic it came from, once: a record replayed before is not produced again and is answered already-replayed. " +
		"Audited (deadletter.replay). 503 when this server has no Kafka client.",
	"operations": "What the pipeline is doing: decisions per second by code, consumed records and dead letters per second " +
		"over the last minute, the consumer groups' lag per topic and the records held by each DLT (from Kafka), and " +
		"whether judging is paused on an untrusted Redis state. Rates compare two samples this server took: the first " +
		"request after a start has none.",
}

// errNoDeadLetters answers the dead-letter routes of an API without
// Config.DeadLetters.
func errNoDeadLetters() error {
	return huma.NewError(http.StatusServiceUnavailable,
		"the dead-letter browser is not available: this server was started without a Kafka client")
}

func (a *routes) registerOps() {
	op := func(id, method, path, summary string, errs ...int) huma.Operation {
		return huma.Operation{OperationID: id, Method: method, Path: path, Summary: summary, Description: opsDocs[id],
			Tags: []string{Tag}, Security: view.Secured(),
			Errors: append([]int{http.StatusUnauthorized, http.StatusForbidden}, errs...)}
	}
	huma.Register(a.api, op("list-dead-letters", http.MethodGet, "/admin/dead-letters", "Browse dead-letter records",
		http.StatusUnprocessableEntity, http.StatusServiceUnavailable),
		func(ctx context.Context, in *struct {
			Topic  string `query:"topic" enum:"usage-events.DLT,policy-updated.DLT,usage-persist.DLT,notification-events.DLT" doc:"One DLT; absent: all"`
			Limit  int    `query:"limit" minimum:"1" maximum:"200" default:"50"`
			Before string `query:"before" maxLength:"4000" doc:"The previous page's nextBefore"`
		}) (*struct{ Body DeadLetterList }, error) {
			if _, err := a.admin(ctx); err != nil {
				return nil, err
			}
			if a.cfg.DeadLetters == nil {
				return nil, errNoDeadLetters()
			}
			q := kafkaops.DeadLetterQuery{Topics: kafkaops.DeadLetterTopics(), Limit: in.Limit}
			if in.Topic != "" {
				q.Topics = []string{in.Topic}
			}
			if q.Limit == 0 {
				q.Limit = 50
			}
			if in.Before != "" {
				var err error
				if q.Before, err = parseCursor(in.Before); err != nil {
					return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "query.before",
						Message: "not a nextBefore of this route", Value: in.Before})
				}
			}
			page, err := a.cfg.DeadLetters.List(ctx, q)
			if err != nil {
				a.log.WarnContext(ctx, "api: kafka", "err", err)
				return nil, huma.Error503ServiceUnavailable("Kafka did not answer: try again")
			}
			refs := make([]store.DeadLetterRef, 0, len(page.Records))
			for _, d := range page.Records {
				refs = append(refs, store.DeadLetterRef{Topic: d.Topic, Partition: d.Partition, Offset: d.Offset})
			}
			replays, err := a.cfg.Store.Replays(ctx, refs)
			if err != nil {
				return nil, a.problem(ctx, err, "query")
			}
			out := DeadLetterList{Records: make([]DeadLetterView, 0, len(page.Records)), NextBefore: formatCursor(page.Next)}
			for i, d := range page.Records {
				v := deadLetterView(d)
				if rp, ok := replays[refs[i]]; ok {
					v.Replayed = &Replayed{At: rp.At, By: rp.By}
				}
				out.Records = append(out.Records, v)
			}
			return &struct{ Body DeadLetterList }{Body: out}, nil
		})

	huma.Register(a.api, op("replay-dead-letters", http.MethodPost, "/admin/dead-letters/replay",
		"Replay dead-letter records to their origin topics", http.StatusUnprocessableEntity, http.StatusServiceUnavailable),
		func(ctx context.Context, in *struct{ Body DeadLetterSelection }) (*struct{ Body DeadLetterReplayReport }, error) {
			p, err := a.admin(ctx)
			if err != nil {
				return nil, err
			}
			if a.cfg.DeadLetters == nil {
				return nil, errNoDeadLetters()
			}
			out := DeadLetterReplayReport{Results: make([]ReplayOutcome, 0, len(in.Body.Records))}
			for _, r := range in.Body.Records {
				res := a.replay(ctx, r, p)
				switch res.Status {
				case "replayed":
					out.Replayed++
				case "already-replayed":
					out.AlreadyReplayed++
				default:
					out.Failed++
				}
				out.Results = append(out.Results, res)
			}
			return &struct{ Body DeadLetterReplayReport }{Body: out}, nil
		})

	huma.Register(a.api, op("operations", http.MethodGet, "/admin/operations", "Pipeline operations: rates, lag, dead letters"),
		func(ctx context.Context, _ *struct{}) (*struct{ Body OperationsView }, error) {
			if _, err := a.admin(ctx); err != nil {
				return nil, err
			}
			return &struct{ Body OperationsView }{Body: a.operations(ctx)}, nil
		})
}

// replay replays one dead-letter record once (store.ReplayDeadLetter).
func (a *routes) replay(ctx context.Context, r DeadLetterRecord, by store.Actor) ReplayOutcome {
	out := ReplayOutcome{DeadLetterRecord: r}
	ref := store.DeadLetterRef{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	// A record replayed before is answered without reading Kafka (it may
	// have been deleted by retention since).
	if rs, err := a.cfg.Store.Replays(ctx, []store.DeadLetterRef{ref}); err == nil {
		if rp, ok := rs[ref]; ok {
			out.Status, out.OriginTopic, out.Replayed = "already-replayed", rp.Origin, &Replayed{At: rp.At, By: rp.By}
			return out
		}
	}
	d, err := a.cfg.DeadLetters.Get(ctx, kafkaops.TopicPartition{Topic: r.Topic, Partition: r.Partition}, r.Offset)
	if errors.Is(err, kafkaops.ErrDeadLetterNotFound) {
		out.Status, out.Error = "not-found", "no such record in the dead-letter topic (or no longer retained)"
		return out
	}
	if err != nil {
		a.log.WarnContext(ctx, "api: read dead letter", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
		out.Status, out.Error = "failed", "the record could not be read from Kafka: try again"
		return out
	}
	out.OriginTopic = d.Origin
	if want := strings.TrimSuffix(r.Topic, envelope.DLT("")); d.Origin != want || d.OriginPartition < 0 {
		out.Status, out.Error = "failed", fmt.Sprintf("the record's origin headers name topic %q partition %d, not a partition of %q: it cannot be replayed",
			d.Origin, d.OriginPartition, want)
		return out
	}
	rp, first, err := a.cfg.Store.ReplayDeadLetter(ctx, ref, d.Origin, by, func(ctx context.Context) error {
		// The replay's row is locked (and SQLite's one connection held)
		// until the broker answers: bound the wait.
		ctx, cancel := context.WithTimeout(ctx, replayTimeout)
		defer cancel()
		return a.cfg.DeadLetters.Replay(ctx, d)
	})
	if err != nil {
		a.log.WarnContext(ctx, "api: replay dead letter", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
		out.Status, out.Error = "failed", "the record could not be replayed: try again"
		return out
	}
	out.Status, out.Replayed = "replayed", &Replayed{At: rp.At, By: rp.By}
	if !first {
		out.Status = "already-replayed"
	}
	return out
}

func deadLetterView(d kafkaops.DeadLetter) DeadLetterView {
	v := DeadLetterView{Topic: d.Topic, Partition: d.Partition, Offset: d.Offset, Time: d.Time.UTC(), Reason: d.Reason,
		OriginTopic: d.Origin, OriginPartition: d.OriginPartition, OriginOffset: d.OriginOffset, Channel: d.Channel,
		PayloadBytes: len(d.Value)}
	for _, h := range d.Headers {
		switch h.Key {
		case kafkarecord.HeaderEventType:
			v.EventType = string(h.Value)
		case kafkaops.HeaderReplayedFrom:
			v.ReplayedFrom = string(h.Value)
		}
	}
	if utf8.Valid(d.Key) {
		v.Key = string(d.Key)
	} else {
		v.Key = base64.StdEncoding.EncodeToString(d.Key)
	}
	val := d.Value
	if len(val) > MaxDeadLetterPayload {
		val, v.Truncated = val[:MaxDeadLetterPayload], true
	}
	switch {
	case !v.Truncated && json.Valid(val):
		v.Payload, v.PayloadEncoding = string(val), "json"
	case utf8.Valid(val):
		v.Payload, v.PayloadEncoding = string(val), "text"
	default:
		v.Payload, v.PayloadEncoding = base64.StdEncoding.EncodeToString(val), "base64"
	}
	return v
}

// formatCursor writes a page position as topic:partition:offset,… (sorted).
func formatCursor(m map[kafkaops.TopicPartition]int64) string {
	parts := make([]string, 0, len(m))
	for tp, o := range m {
		parts = append(parts, tp.Topic+":"+strconv.FormatInt(int64(tp.Partition), 10)+":"+strconv.FormatInt(o, 10))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// parseCursor reads formatCursor's text; only DLTs of DPCS topics are accepted.
func parseCursor(s string) (map[kafkaops.TopicPartition]int64, error) {
	out := map[kafkaops.TopicPartition]int64{}
	for part := range strings.SplitSeq(s, ",") {
		f := strings.Split(part, ":")
		if len(f) != 3 || !slices.Contains(kafkaops.DeadLetterTopics(), f[0]) {
			return nil, errors.New("bad cursor")
		}
		p, err1 := strconv.ParseInt(f[1], 10, 32)
		o, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || p < 0 || o < 0 {
			return nil, errors.New("bad cursor")
		}
		out[kafkaops.TopicPartition{Topic: f[0], Partition: int32(p)}] = o
	}
	return out, nil
}

// operations samples the metrics sources and Kafka.
func (a *routes) operations(ctx context.Context) OperationsView {
	now := a.cfg.Clock()
	v := OperationsView{At: now.UTC(), DecisionsPerSecond: map[string]float64{}, Kafka: "not-configured", Sources: []MetricsSource{}}
	fig := opsFigures{decisions: map[string]float64{}}
	for i, g := range a.cfg.OperationsMetrics {
		src := MetricsSource{Source: "process", OK: true}
		if s, ok := g.(*MetricsScraper); ok {
			src.Source = s.URL
		} else if len(a.cfg.OperationsMetrics) > 1 {
			src.Source = fmt.Sprintf("process %d", i+1)
		}
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		fams, err := gatherSource(gctx, g)
		cancel()
		if err != nil {
			src.OK, src.Error = false, sourceError(err)
			a.log.WarnContext(ctx, "api: operations: metrics source", "source", src.Source, "err", err)
		}
		fig.add(fams)
		v.Sources = append(v.Sources, src)
	}
	if fig.lagSeen {
		l := fig.lag
		v.ReportedLag = &l
	}
	if fig.staleSeen {
		s := fig.stale > 0
		v.RedisStale = &s
	}
	if base, ok := a.ops.add(opsSample{at: now, f: fig}); ok {
		secs := now.Sub(base.at).Seconds()
		v.WindowSeconds = secs
		for code, n := range fig.decisions {
			r := increase(base.f.decisions[code], n) / secs
			v.DecisionsPerSecond[code] = r
			v.TotalPerSecond += r
		}
		v.RecordsPerSecond = increase(base.f.records, fig.records) / secs
		v.DeadLettersPerSecond = increase(base.f.deadLetters, fig.deadLetters) / secs
	}
	if a.cfg.KafkaStats != nil {
		v.Kafka = "ok"
		kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		lags, err := a.cfg.KafkaStats.Lag(kctx, judge.ProcessorGroup, notify.DefaultGroup, writebehind.DefaultGroup)
		if err == nil {
			v.ProcessorLag, v.NotifierLag, v.WriteBehindLag = lags[judge.ProcessorGroup], lags[notify.DefaultGroup], lags[writebehind.DefaultGroup]
			v.DeadLetters, err = a.cfg.KafkaStats.Records(kctx, kafkaops.DeadLetterTopics()...)
		}
		if err != nil {
			a.log.WarnContext(ctx, "api: operations: kafka", "err", err)
			v.Kafka = "unavailable"
		}
	}
	return v
}
