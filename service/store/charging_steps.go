package store

import (
	"bytes"
	"context"
	"database/sql"
	"slices"
	"strings"
	"time"
)

// RecordChargingStep stores step on session ref if the session is still
// where the caller read it: OPEN with last_seq prevSeq. It reports whether
// it did; false means another step got there first (read the session again).
func (s *Store) RecordChargingStep(ctx context.Context, ref string, prevSeq int64, step ChargingStep) (bool, error) {
	ok, err := s.RecordChargingSteps(ctx, []ChargingStepOn{{Ref: ref, PrevSeq: prevSeq, Step: step}})
	if err != nil {
		return false, err
	}
	return ok[0], nil
}

// ChargingStepOn is a step to record on session Ref, read at last_seq
// PrevSeq (RecordChargingSteps).
type ChargingStepOn struct {
	Ref     string
	PrevSeq int64
	Step    ChargingStep
}

// recordChargingStepSQL is a step's conditional write.
const recordChargingStepSQL = `UPDATE charging_session SET last_seq = ?, last_op = ?, answer = ?, grants = ?, expires_at = ?,
	state = ?, updated_at = ? WHERE ref = ? AND state = ? AND last_seq = ?`

// ChargingStepsPerStatement bounds the steps one UPDATE of
// RecordChargingSteps writes (a batch of more is written by several): a
// writer gathering steps gathers up to it.
const ChargingStepsPerStatement = 16

// recordStepsSQL is the conditional write of n steps in one statement:
// each column set per ref, each row only where its session still is
// (OPEN at its PrevSeq).
func recordStepsSQL(n int) string {
	var b strings.Builder
	b.WriteString("UPDATE charging_session SET ")
	for i, col := range []string{"last_seq", "last_op", "answer", "grants", "expires_at", "state"} {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(col + " = CASE ref")
		for range n {
			b.WriteString(" WHEN ? THEN ?")
		}
		b.WriteString(" END")
	}
	b.WriteString(", updated_at = ? WHERE state = ? AND (")
	for i := range n {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("(ref = ? AND last_seq = ?)")
	}
	b.WriteString(")")
	return b.String()
}

// recordStmt is the write of n steps (recordChargingStepSQL for one,
// recordStepsSQL for more) prepared once on the pool: each connection
// prepares it the first time it runs it and keeps it, so a write is one
// round trip, not a prepare, an execute and a close (doc/benchmarks.md,
// "The grant path over Nchf").
func (s *Store) recordStmt(ctx context.Context, n int) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if st := s.recordSteps[n]; st != nil {
		return st, nil
	}
	q := recordChargingStepSQL
	if n > 1 {
		q = recordStepsSQL(n)
	}
	st, err := s.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, dbErr("record charging steps", err)
	}
	if s.recordSteps == nil {
		s.recordSteps = map[int]*sql.Stmt{}
	}
	s.recordSteps[n] = st
	return st, nil
}

// RecordChargingSteps records each step as RecordChargingStep does (the
// charging interface's steps of one moment, each of another session), in
// the order of their sessions' refs: one autocommitted UPDATE for up to
// ChargingStepsPerStatement of them, a single round trip and commit (a
// transaction would add two: on MariaDB a batch of two steps cost 89 µs
// in one against 45 for a lone step's statement, doc/benchmarks.md).
//
// When a statement of several steps writes fewer rows than it has steps
// (a session moved on: another process stepped or closed it), its
// sessions are read back: a step is recorded when its session holds
// exactly what the statement wrote (its seq, op, answer and state, at the
// statement's updated_at); another writer's step differs at least in its
// answer's time.
// ok[i] reports whether steps[i] was recorded. An error may leave some
// statements written: the caller reads the sessions again (a step's
// invocation retried finds its answer).
func (s *Store) RecordChargingSteps(ctx context.Context, steps []ChargingStepOn) ([]bool, error) {
	type row struct {
		i      int
		grants string
	}
	rows := make([]row, len(steps))
	for i, st := range steps {
		g, err := grantsJSON(st.Step.Grants)
		if err != nil {
			return nil, err
		}
		rows[i] = row{i, g}
	}
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(steps[a.i].Ref, steps[b.i].Ref) })
	ok := make([]bool, len(steps))
	// updated_at keeps milliseconds: the time written is one the read-back
	// (holdSteps) can compare with what the column holds.
	now := s.t(s.now().Truncate(time.Millisecond))
	for start := 0; start < len(rows); start += ChargingStepsPerStatement {
		chunk := rows[start:min(start+ChargingStepsPerStatement, len(rows))]
		stmt, err := s.recordStmt(ctx, len(chunk))
		if err != nil {
			return nil, err
		}
		args := make([]any, 0, 14*len(chunk)+2)
		if len(chunk) == 1 { // recordChargingStepSQL
			st := steps[chunk[0].i]
			args = append(args, st.Step.Seq, st.Step.Op, nullBytes(st.Step.Answer), chunk[0].grants, s.t(st.Step.ExpiresAt),
				string(st.Step.State), now, st.Ref, string(ChargingOpen), st.PrevSeq)
		} else { // recordStepsSQL: each column's (ref, value) pairs, the common ones, each (ref, last_seq)
			for _, col := range []func(ChargingStepOn, row) any{
				func(st ChargingStepOn, _ row) any { return st.Step.Seq },
				func(st ChargingStepOn, _ row) any { return st.Step.Op },
				func(st ChargingStepOn, _ row) any { return nullBytes(st.Step.Answer) },
				func(_ ChargingStepOn, r row) any { return r.grants },
				func(st ChargingStepOn, _ row) any { return s.t(st.Step.ExpiresAt) },
				func(st ChargingStepOn, _ row) any { return string(st.Step.State) },
			} {
				for _, r := range chunk {
					args = append(args, steps[r.i].Ref, col(steps[r.i], r))
				}
			}
			args = append(args, now, string(ChargingOpen))
			for _, r := range chunk {
				args = append(args, steps[r.i].Ref, steps[r.i].PrevSeq)
			}
		}
		var written int64
		err = s.retryConflicts(ctx, func() error {
			res, err := stmt.ExecContext(ctx, args...)
			if err != nil {
				return dbErr("record charging steps", err)
			}
			if written, err = res.RowsAffected(); err != nil {
				return dbErr("record charging steps", err)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if written == int64(len(chunk)) || len(chunk) == 1 {
			for _, r := range chunk {
				ok[r.i] = written == int64(len(chunk))
			}
			continue
		}
		chunkSteps := make([]ChargingStepOn, len(chunk))
		for k, r := range chunk {
			chunkSteps[k] = steps[r.i]
		}
		held, err := s.holdSteps(ctx, chunkSteps, now)
		if err != nil {
			return nil, err
		}
		for k, r := range chunk {
			ok[r.i] = held[k]
		}
	}
	return ok, nil
}

// holdSteps reports, for each step, whether its session holds exactly
// what the step writes (its seq, op, answer and state) as written at now
// (updated_at: the statement's own time).
func (s *Store) holdSteps(ctx context.Context, steps []ChargingStepOn, now any) ([]bool, error) {
	args := make([]any, 0, len(steps)+1)
	args = append(args, now)
	for _, st := range steps {
		args = append(args, st.Ref)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT ref, state, last_seq, last_op, answer FROM charging_session WHERE updated_at = ? AND ref IN (?`+
		strings.Repeat(", ?", len(steps)-1)+`)`, args...)
	if err != nil {
		return nil, dbErr("record charging steps", err)
	}
	defer rows.Close()
	type state struct {
		state, op string
		seq       int64
		answer    []byte
	}
	is := map[string]state{}
	for rows.Next() {
		var ref string
		var n state
		var answer sql.NullString
		if err := rows.Scan(&ref, &n.state, &n.seq, &n.op, &answer); err != nil {
			return nil, dbErr("record charging steps", err)
		}
		if answer.Valid {
			n.answer = []byte(answer.String)
		}
		is[ref] = n
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("record charging steps", err)
	}
	held := make([]bool, len(steps))
	for i, st := range steps {
		n, found := is[st.Ref]
		held[i] = found && n.state == string(st.Step.State) && n.seq == st.Step.Seq && n.op == st.Step.Op &&
			bytes.Equal(n.answer, st.Step.Answer)
	}
	return held, nil
}
