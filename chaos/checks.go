package chaos

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// maxListed bounds the examples an error lists.
const maxListed = 20

// GroupLag is how far a consumer group's committed offsets are behind the
// end of its topics, summed, with one line per partition that lags.
func GroupLag(ctx context.Context, adm *kadm.Client, group string, topics ...string) (int64, []string, error) {
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return 0, nil, fmt.Errorf("chaos: end offsets of %v: %w", topics, err)
	}
	if err := ends.Error(); err != nil {
		return 0, nil, fmt.Errorf("chaos: end offsets of %v: %w", topics, err)
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return 0, nil, fmt.Errorf("chaos: committed offsets of %s: %w", group, err)
	}
	var total int64
	var lines []string
	ends.Each(func(o kadm.ListedOffset) {
		at := int64(0)
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.At >= 0 {
			at = c.At
		}
		if lag := o.Offset - at; lag > 0 {
			total += lag
			lines = append(lines, fmt.Sprintf("%s %s/%d: end %d, committed %d, lag %d", group, o.Topic, o.Partition, o.Offset, at, lag))
		}
	})
	slices.Sort(lines)
	return total, lines, nil
}

// TopicSizes returns the end offsets of the topics summed per topic (all
// DPCS topics start empty, so this is how many records each holds).
func TopicSizes(ctx context.Context, adm *kadm.Client, topics ...string) (map[string]int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("chaos: end offsets: %w", err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("chaos: end offsets: %w", err)
	}
	out := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Topic] += o.Offset })
	return out, nil
}

// DeadLetters reads up to max records of a dead-letter topic and describes
// each by its reason header and value.
func DeadLetters(ctx context.Context, brokers []string, topic string, max int) ([]string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out []string
	for len(out) < max && ctx.Err() == nil {
		cl.PollRecords(ctx, max-len(out)).EachRecord(func(r *kgo.Record) {
			reason := ""
			for _, h := range r.Headers {
				if h.Key == kafkarecord.HeaderDLTReason {
					reason = string(h.Value)
				}
			}
			out = append(out, fmt.Sprintf("%s/%d@%d reason=%q value=%.200s", r.Topic, r.Partition, r.Offset, reason, r.Value))
		})
	}
	return out, nil
}

// UsageStats describes usage_record.
type UsageStats struct {
	Rows, Distinct int64
	// ByResult counts the events' rows (grant_id empty) by result.
	ByResult map[string]int64
	// Grants counts the grant steps' rows, GrantsCharged those that
	// charged bytes (each notified QUOTA_UPDATED).
	Grants, GrantsCharged int64
}

// Usage counts usage_record's rows, distinct event ids, the events' rows
// per result and the grant steps' rows.
func Usage(ctx context.Context, db *sql.DB) (UsageStats, error) {
	s := UsageStats{ByResult: map[string]int64{}}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT event_id) FROM usage_record`).Scan(&s.Rows, &s.Distinct); err != nil {
		return s, fmt.Errorf("chaos: count usage_record: %w", err)
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(bytes_used > 0), 0) FROM usage_record WHERE grant_id <> ''`).
		Scan(&s.Grants, &s.GrantsCharged); err != nil {
		return s, fmt.Errorf("chaos: count grant steps: %w", err)
	}
	rows, err := db.QueryContext(ctx, `SELECT process_result, COUNT(*) FROM usage_record WHERE grant_id = '' GROUP BY process_result`)
	if err != nil {
		return s, fmt.Errorf("chaos: usage_record by result: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r string
		var n int64
		if err := rows.Scan(&r, &n); err != nil {
			return s, err
		}
		s.ByResult[r] = n
	}
	return s, rows.Err()
}

// Allowed is the number of ALLOWED rows.
func (s UsageStats) Allowed() int64 { return s.ByResult[string(policy.Allowed)] }

// Blocked is the number of events' rows of any BLOCKED_* result.
func (s UsageStats) Blocked() int64 { return s.Rows - s.Grants - s.Allowed() }

// CheckEvents compares usage_record's event ids with the produced ones:
// every produced event exactly once, nothing else.
func CheckEvents(ctx context.Context, db *sql.DB, produced map[string]struct{}) error {
	rows, err := db.QueryContext(ctx, `SELECT event_id, COUNT(*) FROM usage_record GROUP BY event_id`)
	if err != nil {
		return fmt.Errorf("chaos: usage_record ids: %w", err)
	}
	defer rows.Close()
	got := make(map[string]int, len(produced))
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return err
		}
		got[id] = n
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var missing, unexpected, twice []string
	for id := range produced {
		if _, ok := got[id]; !ok {
			missing = append(missing, id)
		}
	}
	for id, n := range got {
		if _, ok := produced[id]; !ok {
			unexpected = append(unexpected, id)
		}
		if n > 1 {
			twice = append(twice, fmt.Sprintf("%s ×%d", id, n))
		}
	}
	var errs []error
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("%d of %d produced events have no usage_record row: %s", len(missing), len(produced), listed(missing)))
	}
	if len(unexpected) > 0 {
		errs = append(errs, fmt.Errorf("%d usage_record rows are for events never produced: %s", len(unexpected), listed(unexpected)))
	}
	if len(twice) > 0 {
		errs = append(errs, fmt.Errorf("%d events have several usage_record rows: %s", len(twice), listed(twice)))
	}
	return errors.Join(errs...)
}

func listed(s []string) string {
	slices.Sort(s)
	if len(s) > maxListed {
		return strings.Join(s[:maxListed], ", ") + fmt.Sprintf(", … (%d more)", len(s)-maxListed)
	}
	return strings.Join(s, ", ")
}

// NotificationStats counts the inbox's rows by kind.
func NotificationStats(ctx context.Context, db *sql.DB) (map[string]int64, error) {
	rows, err := db.QueryContext(ctx, `SELECT kind, COUNT(*) FROM notification GROUP BY kind`)
	if err != nil {
		return nil, fmt.Errorf("chaos: notification by kind: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}

// GrantSteps returns the ids of usage_record's grant-step rows (the
// charging interface's creates, updates and releases): they are not
// produced events, and each is one row like an event's.
func GrantSteps(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT event_id FROM usage_record WHERE grant_id <> ''`)
	if err != nil {
		return nil, fmt.Errorf("chaos: grant steps: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// GrantNotices counts the inbox's QUOTA_UPDATED and CUSTOMER_BLOCKED rows
// that grant steps caused (their event ids derive from the steps' ids, as
// service/judge derives them).
func GrantNotices(ctx context.Context, db *sql.DB, steps []string) (quotaUpdated, blocked int64, err error) {
	want := make(map[string]string, 2*len(steps))
	for _, id := range steps {
		want[envelope.DerivedID(envelope.PrefixNotification, id, "quota-updated")] = string(envelope.SubQuotaUpdated)
		want[envelope.DerivedID(envelope.PrefixNotification, id, "customer-blocked")] = string(envelope.SubCustomerBlocked)
	}
	rows, err := db.QueryContext(ctx, `SELECT event_id, kind FROM notification WHERE kind IN (?, ?)`,
		string(envelope.SubQuotaUpdated), string(envelope.SubCustomerBlocked))
	if err != nil {
		return 0, 0, fmt.Errorf("chaos: grant notifications: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, kind string
		if err := rows.Scan(&id, &kind); err != nil {
			return 0, 0, err
		}
		switch k, ok := want[id]; {
		case !ok:
		case k != kind:
			return 0, 0, fmt.Errorf("chaos: inbox row %s is %s, its id derives from a grant step's %s", id, kind, k)
		case k == string(envelope.SubQuotaUpdated):
			quotaUpdated++
		default:
			blocked++
		}
	}
	return quotaUpdated, blocked, rows.Err()
}

// CheckNotified checks that every judged event was notified exactly once:
// one QUOTA_UPDATED per allowed row, one CUSTOMER_BLOCKED per blocked row
// (the inbox's event_id is unique, so more would be a different id), and
// one QUOTA_UPDATED per grant step that charged bytes. grantQuota and
// grantBlocked are the inbox's rows caused by grant steps (GrantNotices):
// a refused grant step's CUSTOMER_BLOCKED is not one per row, so only the
// events' are counted exactly.
func CheckNotified(kinds map[string]int64, u UsageStats, grantQuota, grantBlocked int64) error {
	var errs []error
	if got := kinds[string(envelope.SubQuotaUpdated)] - grantQuota; got != u.Allowed() {
		errs = append(errs, fmt.Errorf("inbox holds %d QUOTA_UPDATED for events, usage_record %d ALLOWED rows", got, u.Allowed()))
	}
	if grantQuota != u.GrantsCharged {
		errs = append(errs, fmt.Errorf("inbox holds %d QUOTA_UPDATED for grant steps, usage_record %d grant steps that charged bytes", grantQuota, u.GrantsCharged))
	}
	if got := kinds[string(envelope.SubCustomerBlocked)] - grantBlocked; got != u.Blocked() {
		errs = append(errs, fmt.Errorf("inbox holds %d CUSTOMER_BLOCKED for events, usage_record %d blocked rows", got, u.Blocked()))
	}
	return errors.Join(errs...)
}

// CheckReleased checks that no grant holds anything any more: every
// family's pool and every member's day and month have nothing reserved in
// the engine's state. Run after the SMFs released every session (and the
// sweep had time to close the sessions whose answers were lost).
func CheckReleased(ctx context.Context, eng *quota.Engine, families []int64) error {
	var held []string
	for _, fid := range families {
		fs, err := eng.Family(ctx, fid)
		if err != nil {
			return fmt.Errorf("chaos: family %d: %w", fid, err)
		}
		if fs.Reserved != 0 {
			held = append(held, fmt.Sprintf("family %d pool reserved %d", fid, fs.Reserved))
		}
		for _, m := range fs.Members {
			if m.DailyReserved != 0 || m.MonthlyReserved != 0 {
				held = append(held, fmt.Sprintf("family %d member %d reserved %d today, %d this month", fid, m.CustomerID, m.DailyReserved, m.MonthlyReserved))
			}
		}
	}
	if len(held) > 0 {
		return fmt.Errorf("%d reservations still held after every session was released: %s", len(held), listed(held))
	}
	return nil
}

// CheckThresholds checks the THRESHOLD_ALERT rows of the inbox against the
// engine: at most one per family/threshold/period; for every family, the
// engine fired exactly the thresholds its pool is at or below
// (remaining ≤ pct % of total), and the inbox holds exactly one alert for
// each of them this month. It returns the number of alerts.
//
// A family in rearmed had top-ups during the run, which re-arm the
// thresholds its pool is above again: its earlier arms' alerts stay in the
// inbox (periods "YYYY-MM#n"), so for it every fired threshold must have an
// alert of some arm, and alerts of thresholds no longer fired are expected.
func CheckThresholds(ctx context.Context, db *sql.DB, eng *quota.Engine, families []int64, rearmed map[int64]bool) (int, error) {
	rows, err := db.QueryContext(ctx, `SELECT event_id, family_id, payload FROM notification WHERE kind = ?`, string(envelope.SubThresholdAlert))
	if err != nil {
		return 0, fmt.Errorf("chaos: threshold alerts: %w", err)
	}
	defer rows.Close()
	type key struct {
		fid    int64
		pct    int
		period string
	}
	alerts := map[key][]string{}
	n := 0
	for rows.Next() {
		var id, payload string
		var fid int64
		if err := rows.Scan(&id, &fid, &payload); err != nil {
			return 0, err
		}
		var p envelope.ThresholdAlert
		if err := json.Unmarshal([]byte(payload), &p); err != nil {
			return 0, fmt.Errorf("chaos: alert %s: %w", id, err)
		}
		k := key{fid, p.ThresholdPercent, p.Period}
		alerts[k] = append(alerts[k], id)
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var errs []error
	for _, k := range slices.SortedFunc(maps.Keys(alerts), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.fid, b.fid), cmp.Compare(a.pct, b.pct), strings.Compare(a.period, b.period))
	}) {
		if ids := alerts[k]; len(ids) > 1 {
			errs = append(errs, fmt.Errorf("family %d threshold %d%% period %s: %d alerts %v", k.fid, k.pct, k.period, len(ids), ids))
		}
	}
	seen := map[key]bool{}
	for _, fid := range families {
		fs, err := eng.Family(ctx, fid)
		if err != nil {
			return n, fmt.Errorf("chaos: family %d: %w", fid, err)
		}
		period := fs.Month[:4] + "-" + fs.Month[4:]
		var want []int
		for _, p := range fs.Thresholds {
			if fs.Total > 0 && fs.Used > 0 && fs.Remaining*100 <= int64(p)*fs.Total {
				want = append(want, p)
			}
		}
		fired := slices.Clone(fs.Fired)
		slices.Sort(want)
		slices.Sort(fired)
		if !slices.Equal(want, fired) {
			errs = append(errs, fmt.Errorf("family %d: pool %d of %d left with thresholds %v: engine fired %v, expected %v",
				fid, fs.Remaining, fs.Total, fs.Thresholds, fired, want))
		}
		var alerted []int
		for _, p := range fs.Thresholds {
			k := key{fid, p, period}
			if len(alerts[k]) > 0 {
				alerted = append(alerted, p)
				seen[k] = true
			}
		}
		if rearmed[fid] {
			alerted = alerted[:0]
			for k := range alerts {
				if k.fid == fid && (k.period == period || strings.HasPrefix(k.period, period+"#")) {
					seen[k] = true
					if !slices.Contains(alerted, k.pct) {
						alerted = append(alerted, k.pct)
					}
				}
			}
			for _, p := range fired {
				if !slices.Contains(alerted, p) {
					errs = append(errs, fmt.Errorf("family %d (topped up): engine fired %d%% this month (%s), the inbox has no alert for it in any arm: %v",
						fid, p, period, alerted))
				}
			}
			continue
		}
		slices.Sort(alerted)
		if !slices.Equal(fired, alerted) {
			errs = append(errs, fmt.Errorf("family %d: engine fired %v this month (%s), inbox has alerts for %v", fid, fired, period, alerted))
		}
	}
	var stray []string
	for k := range alerts {
		if !seen[k] {
			stray = append(stray, fmt.Sprintf("family %d %d%% %s", k.fid, k.pct, k.period))
		}
	}
	if len(stray) > 0 {
		errs = append(errs, fmt.Errorf("%d alerts for no fired threshold of a provisioned family this month: %s", len(stray), listed(stray)))
	}
	return n, errors.Join(errs...)
}

// CheckNotMember fails when usage_record holds any event judged
// BLOCKED_NOT_MEMBER: every member the traffic uses is provisioned, so such
// a judgement comes from a Redis that lost its state.
func CheckNotMember(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, `SELECT event_id, family_id, customer_id FROM usage_record WHERE process_result = ?`,
		string(policy.BlockedNotMember))
	if err != nil {
		return fmt.Errorf("chaos: BLOCKED_NOT_MEMBER rows: %w", err)
	}
	defer rows.Close()
	var bad []string
	for rows.Next() {
		var id string
		var fid, cid int64
		if err := rows.Scan(&id, &fid, &cid); err != nil {
			return err
		}
		bad = append(bad, fmt.Sprintf("%s (family %d member %d)", id, fid, cid))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d events of provisioned members judged %s: %s", len(bad), policy.BlockedNotMember, listed(bad))
	}
	return nil
}

// allowedRow is one usage_record row that spent bytes: an ALLOWED
// event or a grant step (its charge, whatever its decision).
type allowedRow struct {
	fid, cid, bytes int64
	at              time.Time
}

func allowedRows(ctx context.Context, db *sql.DB) ([]allowedRow, error) {
	rows, err := db.QueryContext(ctx, `SELECT family_id, customer_id, bytes_used, event_time FROM usage_record
		WHERE process_result = ? OR grant_id <> ''`, string(policy.Allowed))
	if err != nil {
		return nil, fmt.Errorf("chaos: allowed rows: %w", err)
	}
	defer rows.Close()
	var out []allowedRow
	for rows.Next() {
		var r allowedRow
		if err := rows.Scan(&r.fid, &r.cid, &r.bytes, &r.at); err != nil {
			return nil, fmt.Errorf("chaos: allowed rows: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// CheckPlans checks, from SQL alone, that nobody spent over plan: for every
// family and month (in loc), Σ bytes of its ALLOWED usage_record rows and grant charges ≤ its
// plan (families.plan_bytes) + that month's top-ups. It returns the number
// of family-months checked.
func CheckPlans(ctx context.Context, db *sql.DB, loc *time.Location) (int, error) {
	plans := map[int64]int64{}
	rows, err := db.QueryContext(ctx, `SELECT id, plan_bytes FROM families`)
	if err != nil {
		return 0, fmt.Errorf("chaos: plans: %w", err)
	}
	for rows.Next() {
		var fid, plan int64
		if err := rows.Scan(&fid, &plan); err != nil {
			rows.Close()
			return 0, err
		}
		plans[fid] = plan
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	type fm struct {
		fid   int64
		month string
	}
	topups := map[fm]int64{}
	rows, err = db.QueryContext(ctx, `SELECT family_id, month, SUM(bytes) FROM topups GROUP BY family_id, month`)
	if err != nil {
		return 0, fmt.Errorf("chaos: top-ups: %w", err)
	}
	for rows.Next() {
		var k fm
		var n int64
		if err := rows.Scan(&k.fid, &k.month, &n); err != nil {
			rows.Close()
			return 0, err
		}
		topups[k] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	allowed, err := allowedRows(ctx, db)
	if err != nil {
		return 0, err
	}
	spent := map[fm]int64{}
	for _, r := range allowed {
		spent[fm{r.fid, policy.MomentOf(r.at, loc).Month}] += r.bytes
	}
	var over []string
	for k, n := range spent {
		plan, ok := plans[k.fid]
		if !ok {
			over = append(over, fmt.Sprintf("family %d (not provisioned) allowed %d bytes in %s", k.fid, n, k.month))
			continue
		}
		if limit := plan + topups[k]; n > limit {
			over = append(over, fmt.Sprintf("family %d month %s: allowed %d bytes, plan %d + top-ups %d", k.fid, k.month, n, plan, topups[k]))
		}
	}
	if len(over) > 0 {
		return len(spent), fmt.Errorf("%d family-months over plan in usage_record: %s", len(over), listed(over))
	}
	return len(spent), nil
}

// CheckMemberLimits checks, from SQL alone, that no member with a monthly
// or daily limit for the whole run was allowed more than it in a month or a
// day (in loc). It returns the number of member-periods checked.
func CheckMemberLimits(ctx context.Context, db *sql.DB, loc *time.Location, monthly, daily map[int64]int64) (int, error) {
	allowed, err := allowedRows(ctx, db)
	if err != nil {
		return 0, err
	}
	type cp struct {
		cid    int64
		period string
	}
	months, days := map[cp]int64{}, map[cp]int64{}
	for _, r := range allowed {
		m := policy.MomentOf(r.at, loc)
		if _, ok := monthly[r.cid]; ok {
			months[cp{r.cid, m.Month}] += r.bytes
		}
		if _, ok := daily[r.cid]; ok {
			days[cp{r.cid, m.Day}] += r.bytes
		}
	}
	var over []string
	for k, n := range months {
		if n > monthly[k.cid] {
			over = append(over, fmt.Sprintf("member %d month %s: allowed %d bytes, monthly limit %d", k.cid, k.period, n, monthly[k.cid]))
		}
	}
	for k, n := range days {
		if n > daily[k.cid] {
			over = append(over, fmt.Sprintf("member %d day %s: allowed %d bytes, daily limit %d", k.cid, k.period, n, daily[k.cid]))
		}
	}
	if len(over) > 0 {
		return len(months) + len(days), fmt.Errorf("%d member periods over a limit in usage_record: %s", len(over), listed(over))
	}
	return len(months) + len(days), nil
}

// AlertStats is what CheckAlertTopic read.
type AlertStats struct {
	Records   int64 // records read from the topic
	Alerts    int   // THRESHOLD_ALERT records
	Keys      int   // distinct (family, threshold, period)
	Redeliver int   // THRESHOLD_ALERT records repeating an event id already read
}

// CheckAlertTopic reads the notification topic from its start to its end
// (as TopicSizes saw it: want records) and checks that every (family,
// threshold percent, period) has at most one distinct THRESHOLD_ALERT event
// id: the same event twice is a duplicate delivery, two events are an alert
// sent twice.
func CheckAlertTopic(ctx context.Context, brokers []string, topic string, want int64) (AlertStats, error) {
	var s AlertStats
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return s, err
	}
	defer cl.Close()
	type key struct {
		fid    int64
		pct    int
		period string
	}
	ids := map[key]map[string]bool{}
	var errs []error
	stall := time.Now()
	for s.Records < want {
		if time.Since(stall) > 30*time.Second {
			return s, fmt.Errorf("chaos: read %d of %d records of %s, none for 30 s", s.Records, want, topic)
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		fs := cl.PollRecords(pctx, 10_000)
		cancel()
		if ctx.Err() != nil {
			return s, ctx.Err()
		}
		fs.EachRecord(func(r *kgo.Record) {
			s.Records++
			stall = time.Now()
			alert := false
			for _, h := range r.Headers {
				if h.Key == kafkarecord.HeaderSubType && string(h.Value) == string(envelope.SubThresholdAlert) {
					alert = true
				}
			}
			if !alert {
				return
			}
			ev, err := kafkarecord.Decode(r)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err))
				return
			}
			var p envelope.ThresholdAlert
			switch v := ev.Payload.(type) {
			case envelope.ThresholdAlert:
				p = v
			case *envelope.ThresholdAlert:
				p = *v
			default:
				errs = append(errs, fmt.Errorf("%s/%d@%d: THRESHOLD_ALERT header with a %T payload", r.Topic, r.Partition, r.Offset, ev.Payload))
				return
			}
			s.Alerts++
			k := key{p.FamilyID, p.ThresholdPercent, p.Period}
			if ids[k] == nil {
				ids[k] = map[string]bool{}
			}
			if ids[k][ev.EventID] {
				s.Redeliver++
			}
			ids[k][ev.EventID] = true
		})
	}
	s.Keys = len(ids)
	var twice []string
	for k, set := range ids {
		if len(set) > 1 {
			twice = append(twice, fmt.Sprintf("family %d %d%% %s: events %v", k.fid, k.pct, k.period, slices.Sorted(maps.Keys(set))))
		}
	}
	if len(twice) > 0 {
		errs = append(errs, fmt.Errorf("%d thresholds alerted more than once on %s: %s", len(twice), topic, listed(twice)))
	}
	return s, errors.Join(errs...)
}
