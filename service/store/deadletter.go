package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/dabom/dpcs/internal/sqldialect"
)

// DeadLetterRef is a record's place in a dead-letter topic.
type DeadLetterRef struct {
	Topic     string
	Partition int32
	Offset    int64
}

func (r DeadLetterRef) target() string {
	return "dlt:" + r.Topic + "/" + strconv.FormatInt(int64(r.Partition), 10) + "/" + strconv.FormatInt(r.Offset, 10)
}

// Replay is the record that a dead-letter record was replayed.
type Replay struct {
	DeadLetterRef
	Origin string
	By     int64
	At     time.Time
}

// ReplayDeadLetter replays the dead-letter record ref to its origin topic
// once: in one transaction it records the replay, calls produce (which
// sends the record back to origin and returns once the broker acknowledged
// it) and audits deadletter.replay (target dlt:<topic>/<partition>/<offset>).
// A record replayed before is not produced again: the earlier Replay is
// returned with first false. A failing produce records nothing. Concurrent
// replays of one record serialise on its row: one produces, the others
// answer first false.
func (s *Store) ReplayDeadLetter(ctx context.Context, ref DeadLetterRef, origin string, by Actor,
	produce func(context.Context) error) (rp Replay, first bool, err error) {
	if ref.Topic == "" || origin == "" || ref.Partition < 0 || ref.Offset < 0 {
		return Replay{}, false, invalid("record", "a topic, its origin, a partition and an offset >= 0 are needed")
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO deadletter_replay (dlt_topic, dlt_partition, dlt_offset, origin_topic, replayed_by, replayed_at)
			VALUES (?, ?, ?, ?, ?, ?)`, ref.Topic, ref.Partition, ref.Offset, origin, by.ID, s.t(now))
		if sqldialect.IsDuplicate(err) {
			rp, err = s.replay(ctx, tx, ref)
			return err
		}
		if err != nil {
			return dbErr("record replay", err)
		}
		if err := produce(ctx); err != nil {
			return fmt.Errorf("store: replay %s: %w", ref.target(), err)
		}
		rp, first = Replay{DeadLetterRef: ref, Origin: origin, By: by.ID, At: now}, true
		type snapshot struct {
			Topic     string `json:"topic"`
			Partition int32  `json:"partition"`
			Offset    int64  `json:"offset"`
			Origin    string `json:"origin"`
		}
		return s.audit(ctx, tx, 0, by, "deadletter.replay", ref.target(), nil, snapshot{ref.Topic, ref.Partition, ref.Offset, origin})
	})
	if err != nil {
		return Replay{}, false, err
	}
	return rp, first, nil
}

func (s *Store) replay(ctx context.Context, q querier, ref DeadLetterRef) (Replay, error) {
	rp := Replay{DeadLetterRef: ref}
	var at sqldialect.NullTime
	err := q.QueryRowContext(ctx, `SELECT origin_topic, replayed_by, replayed_at FROM deadletter_replay
		WHERE dlt_topic = ? AND dlt_partition = ? AND dlt_offset = ?`, ref.Topic, ref.Partition, ref.Offset).Scan(&rp.Origin, &rp.By, &at)
	if err != nil {
		return Replay{}, dbErr("get replay", err)
	}
	rp.At = at.Time
	return rp, nil
}

// Replays returns the replays of the given records that happened, by ref.
func (s *Store) Replays(ctx context.Context, refs []DeadLetterRef) (map[DeadLetterRef]Replay, error) {
	out := make(map[DeadLetterRef]Replay)
	type part struct {
		topic string
		p     int32
	}
	bounds := make(map[part][2]int64)
	for _, r := range refs {
		k := part{r.Topic, r.Partition}
		b, ok := bounds[k]
		if !ok {
			b = [2]int64{r.Offset, r.Offset}
		}
		bounds[k] = [2]int64{min(b[0], r.Offset), max(b[1], r.Offset)}
	}
	want := make(map[DeadLetterRef]bool, len(refs))
	for _, r := range refs {
		want[r] = true
	}
	for k, b := range bounds {
		rows, err := s.db.QueryContext(ctx, `SELECT dlt_offset, origin_topic, replayed_by, replayed_at FROM deadletter_replay
			WHERE dlt_topic = ? AND dlt_partition = ? AND dlt_offset BETWEEN ? AND ?`, k.topic, k.p, b[0], b[1])
		if err != nil {
			return nil, dbErr("list replays", err)
		}
		err = scanRows(rows, "list replays", func(sc scanner) error {
			rp := Replay{DeadLetterRef: DeadLetterRef{Topic: k.topic, Partition: k.p}}
			var at sqldialect.NullTime
			if err := sc.Scan(&rp.Offset, &rp.Origin, &rp.By, &at); err != nil {
				return err
			}
			rp.At = at.Time
			if want[rp.DeadLetterRef] {
				out[rp.DeadLetterRef] = rp
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
