package store

import (
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// column is a column as the migrations declare it: its width in
// characters, or -1 for a type without one (TEXT).
type column struct {
	typ   string
	width int
}

var (
	createTable = regexp.MustCompile(`(?is)CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\n\)`)
	alterAdd    = regexp.MustCompile(`(?i)ALTER TABLE (\w+) ADD COLUMN (\w+) ([A-Z]+(?:\(\d+\))?)`)
	columnLine  = regexp.MustCompile(`^\s*(\w+)\s+([A-Za-z]+(?:\(\d+\))?)`)
	widthOf     = regexp.MustCompile(`\((\d+)\)`)
)

// schema reads every table's columns from dialect's migrations (the
// CREATE TABLE statements and the columns added by columns/*.sql).
func schema(t *testing.T, dialect string) map[string]map[string]column {
	t.Helper()
	out := map[string]map[string]column{}
	add := func(table, name, typ string) {
		c := column{typ: strings.ToUpper(typ), width: -1}
		if m := widthOf.FindStringSubmatch(typ); m != nil {
			c.width, _ = strconv.Atoi(m[1])
		}
		if out[table] == nil {
			out[table] = map[string]column{}
		}
		out[table][strings.ToLower(name)] = c
	}
	err := fs.WalkDir(migrations, "migrations/"+dialect, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".sql") {
			return err
		}
		b, err := migrations.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		for _, m := range createTable.FindAllStringSubmatch(src, -1) {
			for _, line := range strings.Split(m[2], "\n") {
				c := columnLine.FindStringSubmatch(line)
				if c == nil {
					continue
				}
				switch strings.ToUpper(c[1]) {
				case "PRIMARY", "UNIQUE", "KEY", "INDEX", "CONSTRAINT", "FOREIGN", "CHECK":
					continue
				}
				add(m[1], c[1], c[2])
			}
		}
		for _, m := range alterAdd.FindAllStringSubmatch(src, -1) {
			add(m[1], m[2], m[3])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func textual(c column) bool {
	return strings.Contains(c.typ, "CHAR") || strings.Contains(c.typ, "TEXT")
}

// One set of bounds for ids and texts from the envelope to the SQL
// columns: walking both dialects' schemas, every column a judged event's
// record or a judge's bookkeeping fills holds the longest value the bound
// that feeds it lets through (doc/architecture.md, "Whatever a judge
// accepts, the truth can store"). Every text column of usage_record — the
// table the write-behind fills after Redis was charged — must be listed,
// so a new one cannot be added without its bound.
// TestWhatTheJudgeAcceptsTheTruthStores (service/judge) judges events at
// each bound and stores their records.
func TestBoundsFitTheColumns(t *testing.T) {
	longestDecision := 0
	for _, d := range policy.Decisions() {
		longestDecision = max(longestDecision, len(d))
	}
	// Crossings: at most every threshold of a family at once, each
	// "pct:arm" with an arm the engine counts exactly (< 2^53).
	var crossed []envelope.Crossing
	for i := range policy.MaxThresholds {
		crossed = append(crossed, envelope.Crossing{Percent: 99 - i, Arm: 1 << 53})
	}
	longestCrossed := len(FormatCrossed(crossed))
	generation := len(quota.NewOnTouchGeneration(time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), strings.Repeat("f", 12)))
	feeds := []struct {
		table, column string
		bound         int
		what          string
	}{
		{"usage_record", "event_id", quota.MaxEventIDLen, "quota.MaxEventIDLen, the event id a judge takes"},
		{"usage_record", "app_id", policy.MaxAppIDLen, "policy.MaxAppIDLen, the app id a judge takes"},
		{"usage_record", "rule", policy.MaxKeyLen, "policy.MaxKeyLen: a rule is a key or a key prefix with the app id"},
		{"usage_record", "process_result", longestDecision, "the longest policy.Decision"},
		{"usage_record", "crossed", longestCrossed, "policy.MaxThresholds crossings with arms below 2^53"},
		{"app_catalog", "app_id", policy.MaxAppIDLen, "policy.MaxAppIDLen: the catalog names what is judged"},
		{"data_request", "app_id", policy.MaxAppIDLen, "policy.MaxAppIDLen: an APP request names a judged app"},
		{"redis_state", "generation", generation, "quota.NewOnTouchGeneration of a 12-digit id"},
		{"redis_marks", "generation", generation, "quota.NewOnTouchGeneration of a 12-digit id"},
		{"threshold_rearms", "month", len("YYYYMM"), "a month key"},
		{"charging_session", "notify_uri", MaxNotifyURILen, "store.MaxNotifyURILen, the longest notifyUri the charging interface takes"},
		{"charging_session", "subscriber", MaxSubscriberLen, "store.MaxSubscriberLen, where the charging interface cuts a subscriber"},
		{"charging_session", "consumer", MaxConsumerLen, "store.MaxConsumerLen, where the charging interface cuts a consumer"},
		{"charging_session", "ref", 36, "a ChargingDataRef: a UUID"},
		{"charging_session", "create_key", 36, "a create key: a UUID"},
		{"member_imsi", "imsi", 15, "an IMSI: at most 15 digits"},
	}
	for _, dialect := range []string{"mysql", "sqlite"} {
		t.Run(dialect, func(t *testing.T) {
			tables := schema(t, dialect)
			if len(tables["usage_record"]) == 0 {
				t.Fatalf("no usage_record in the %s migrations: the walk read nothing", dialect)
			}
			listed := map[string]bool{}
			for _, f := range feeds {
				listed[f.table+"."+f.column] = true
				c, ok := tables[f.table][f.column]
				switch {
				case !ok:
					t.Errorf("%s.%s: not in the %s migrations", f.table, f.column, dialect)
				case !textual(c):
					t.Errorf("%s.%s is %s, not text", f.table, f.column, c.typ)
				case c.width >= 0 && c.width < f.bound:
					t.Errorf("%s.%s is %s: narrower than %d (%s)", f.table, f.column, c.typ, f.bound, f.what)
				}
			}
			for name, c := range tables["usage_record"] {
				if textual(c) && name != "event_time" && name != "created_at" && !listed["usage_record."+name] {
					t.Errorf("usage_record.%s (%s) has no bound feeding it in this test", name, c.typ)
				}
			}
		})
	}
}
