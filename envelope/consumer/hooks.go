package consumer

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Hooks are optional callbacks; nil funcs are skipped. They carry event
// structs so that fields can be added later. They run on the consumer's
// goroutines (its loop, a finish step, the client's rebalance callbacks):
// they must be quick, and with finish steps (Batch.Finish) they may run
// concurrently.
type Hooks struct {
	// OnBatch is called once a batch was handled, finished, dead-lettered
	// and its commit attempted (see OnCommit for the outcome).
	OnBatch func(BatchInfo)
	// OnRetry is called when a step of a batch failed, before the wait
	// to retry it; fetching is paused meanwhile.
	OnRetry func(RetryInfo)
	// OnDeadLetter is called for every dead letter the broker acknowledged.
	OnDeadLetter func(DeadLetterInfo)
	// OnCommit is called after every commit, refused or not.
	OnCommit func(CommitInfo)
	// OnPause and OnResume are called when fetching pauses for a failing
	// step and when it resumes.
	OnPause  func(PauseInfo)
	OnResume func(PauseInfo)
	// OnAssigned, OnRevoked and OnLost are called when the group assigns
	// partitions to this member, revokes them (after the consumer's one
	// attempt to finish what it holds of them) or loses them (a fatal
	// group error: nothing could be committed). They run in the client's
	// rebalance callbacks, never while a batch is being handled.
	OnAssigned func(PartitionsInfo)
	OnRevoked  func(PartitionsInfo)
	OnLost     func(PartitionsInfo)
}

// BatchInfo describes a batch done, for Hooks.OnBatch.
type BatchInfo struct {
	Records      int           // records committed with the batch
	DeadLettered int           // of which dead-lettered
	Attempts     int           // calls of the handler, ≥ 1
	Duration     time.Duration // from the first handler call to the commit
	// Reason says what made the last attempt: "poll" (each poll is a
	// batch), "size" or "interval" (WithBatch), "retry", "revoke" (the
	// attempt before a revoke) or "close" (the drain).
	Reason string
}

// The steps of a batch, as RetryInfo.Step names them.
const (
	StepHandle     = "handle"      // the Handler
	StepFinish     = "finish"      // the finish step (Batch.Finish)
	StepDeadLetter = "dead letter" // producing the dead letters
)

// RetryInfo describes a failed step that will be retried, for
// Hooks.OnRetry.
type RetryInfo struct {
	Step    string // StepHandle, StepFinish or StepDeadLetter
	Records int    // records in the batch
	Attempt int    // consecutive failures of the batch, from 1
	Wait    time.Duration
	Err     error
}

// DeadLetterInfo describes a dead letter acknowledged by the broker, for
// Hooks.OnDeadLetter.
type DeadLetterInfo struct {
	Record *kgo.Record // the original record
	Topic  string      // the dead-letter topic
	Cause  error       // the reason given to Batch.DeadLetter
}

// CommitInfo describes a commit, for Hooks.OnCommit. A refused commit is
// kept and retried (after a backoff and with every later commit) until it
// succeeds or its partitions are revoked.
type CommitInfo struct {
	// Records is how many records of batches this commit is the first
	// for (a batch's, with those kept for it by WithCommitEvery): 0 when
	// it retries a refused commit alone.
	Records int
	// Offsets are the offsets committed (the next to read) per topic and
	// partition, with those of earlier refused commits.
	Offsets map[string]map[int32]int64
	Err     error
}

// PauseInfo describes a pause or resume of fetching, for Hooks.OnPause and
// Hooks.OnResume.
type PauseInfo struct {
	Topics []string
}

// PartitionsInfo describes partitions assigned, revoked or lost, for
// Hooks.OnAssigned, OnRevoked and OnLost.
type PartitionsInfo struct {
	Partitions map[string][]int32
	// Dropped is how many records the consumer held for these partitions
	// and gave up uncommitted (their next owner reads them again).
	Dropped int
}

// hookList calls every set of hooks in order.
type hookList []Hooks

func (hs hookList) batch(i BatchInfo) {
	for _, h := range hs {
		if h.OnBatch != nil {
			h.OnBatch(i)
		}
	}
}

func (hs hookList) retry(i RetryInfo) {
	for _, h := range hs {
		if h.OnRetry != nil {
			h.OnRetry(i)
		}
	}
}

func (hs hookList) deadLetter(i DeadLetterInfo) {
	for _, h := range hs {
		if h.OnDeadLetter != nil {
			h.OnDeadLetter(i)
		}
	}
}

func (hs hookList) commit(i CommitInfo) {
	for _, h := range hs {
		if h.OnCommit != nil {
			h.OnCommit(i)
		}
	}
}

func (hs hookList) pause(i PauseInfo, paused bool) {
	for _, h := range hs {
		f := h.OnResume
		if paused {
			f = h.OnPause
		}
		if f != nil {
			f(i)
		}
	}
}

func (hs hookList) partitions(i PartitionsInfo, pick func(Hooks) func(PartitionsInfo)) {
	for _, h := range hs {
		if f := pick(h); f != nil {
			f(i)
		}
	}
}
