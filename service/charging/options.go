package charging

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/dabom/dpcs/internal/backoff"
	"github.com/dabom/dpcs/policy"
)

// Defaults of the options.
const (
	DefaultMinGrant         = 1 << 20   // 1 MiB
	DefaultGrant            = 10 << 20  // 10 MiB
	DefaultMaxGrant         = 100 << 20 // 100 MiB
	DefaultValidity         = time.Hour
	DefaultQuotaHoldingTime = 5 * time.Minute
	DefaultThresholdPercent = 20
	DefaultSweepInterval    = 30 * time.Second
	DefaultClosedRetention  = 24 * time.Hour
	DefaultNotifyTimeout    = 3 * time.Second
	DefaultNotifyAttempts   = 5
	DefaultNotifyQueue      = 1024
	DefaultRestrictFilter   = "dpcs-throttled"
	DefaultSessionCache     = 100_000
	DefaultRecordLinger     = time.Millisecond
)

// DefaultNotifyBackoff is the wait between a notification's attempts.
var DefaultNotifyBackoff = backoff.Policy{Min: 200 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}

type options struct {
	now                   func() time.Time
	log                   *slog.Logger
	groups                RatingGroups
	grant, max            int64
	validity, holding     time.Duration
	thresholdPercent      int
	redirectURL           string
	restrictFilter        string
	sweepEvery, retention time.Duration
	notifyClient          *http.Client
	notifyNetworks        []netip.Prefix
	notifyLoopback        bool
	notifyTimeout         time.Duration
	notifyAttempts        int
	notifyBackoff         backoff.Policy
	notifyQueue           int
	cacheSize             int
	recordLinger          time.Duration
	hooks                 Hooks
}

func defaults() options {
	g, _ := ParseRatingGroups(DefaultRatingGroups) // a constant that parses (TestDefaultRatingGroups)
	return options{now: time.Now, log: slog.New(slog.DiscardHandler), groups: g,
		grant: DefaultGrant, max: DefaultMaxGrant,
		validity: DefaultValidity, holding: DefaultQuotaHoldingTime, thresholdPercent: DefaultThresholdPercent,
		restrictFilter: DefaultRestrictFilter, sweepEvery: DefaultSweepInterval, retention: DefaultClosedRetention,
		notifyTimeout: DefaultNotifyTimeout, notifyAttempts: DefaultNotifyAttempts, notifyBackoff: DefaultNotifyBackoff,
		notifyQueue: DefaultNotifyQueue, cacheSize: DefaultSessionCache, recordLinger: DefaultRecordLinger}
}

// Option configures a Service.
type Option func(*options) error

// WithClock sets the clock grants are judged and sessions expire by.
// Default time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return errors.New("charging: nil clock")
		}
		o.now = now
		return nil
	}
}

// WithLogger logs failed notifications and sweeps. Default: discard.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l != nil {
			o.log = l
		}
		return nil
	}
}

// WithRatingGroups sets what each rating group covers. Default:
// DefaultRatingGroups.
func WithRatingGroups(g RatingGroups) Option {
	return func(o *options) error {
		o.groups = g
		return nil
	}
}

// WithGrantSizes sets the grant sizes in bytes: min is the engine's
// (quota.WithGrantSizes, which should be given the same), below whose
// headroom the units granted are the member's last — the interface sends
// finalUnitIndication where the engine's answer is final, not for a grant
// the family's other grants crowd out; def is asked for a rating group
// whose requestedUnit names no volume; max caps every request. Defaults
// 1 MiB, 10 MiB and 100 MiB.
func WithGrantSizes(minimum, def, maximum int64) Option {
	return func(o *options) error {
		if minimum < 0 || def < 1 || maximum < def || maximum > policy.MaxBytes || minimum > maximum {
			return fmt.Errorf("charging: grant sizes: need 0 ≤ min ≤ max, 1 ≤ default ≤ max ≤ %d, got %d, %d, %d",
				policy.MaxBytes, minimum, def, maximum)
		}
		o.grant, o.max = def, maximum
		return nil
	}
}

// WithValidity caps a grant's validityTime: a grant is valid until the
// next boundary that could change its answer, at most this long. Default
// one hour.
func WithValidity(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Second || d > 24*time.Hour {
			return fmt.Errorf("charging: validity must be 1s to 24h, got %v", d)
		}
		o.validity = d
		return nil
	}
}

// WithQuotaHoldingTime sets the quotaHoldingTime of every grant: how long
// the SMF may hold a grant without traffic before it reports it. A session
// not updated within its validity plus this is closed by the sweep.
// Default five minutes.
func WithQuotaHoldingTime(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 || d > 24*time.Hour {
			return fmt.Errorf("charging: quota holding time must be 0 to 24h, got %v", d)
		}
		o.holding = d
		return nil
	}
}

// WithThreshold sets volumeQuotaThreshold as a percentage of each grant:
// the SMF reports when that much of the grant is left. 0 sends none.
// Default 20.
func WithThreshold(percent int) Option {
	return func(o *options) error {
		if percent < 0 || percent > 99 {
			return fmt.Errorf("charging: threshold must be 0 to 99 %%, got %d", percent)
		}
		o.thresholdPercent = percent
		return nil
	}
}

// WithRedirect makes blocked and last grants end in REDIRECT to url (the
// family app's block screen, which says why), with the decision appended as
// a query parameter "reason"; without it they end in TERMINATE. A throttled
// member's last grant ends in RESTRICT_ACCESS either way. Default none.
func WithRedirect(url string) Option {
	return func(o *options) error {
		o.redirectURL = url
		return nil
	}
}

// WithRestrictFilter names the SMF's filter (filterId) a RESTRICT_ACCESS
// applies. Default DefaultRestrictFilter.
func WithRestrictFilter(id string) Option {
	return func(o *options) error {
		if id == "" {
			return errors.New("charging: empty restrict filter")
		}
		o.restrictFilter = id
		return nil
	}
}

// WithSweep sets how often expired sessions are closed (0: never, for
// tests that sweep by hand with Service.Sweep) and how long closed ones are
// kept (a retried release is answered as the first was). Defaults 30 s and
// 24 h.
func WithSweep(every, keepClosed time.Duration) Option {
	return func(o *options) error {
		if every < 0 || keepClosed < time.Minute {
			return fmt.Errorf("charging: sweep every %v, keep closed %v: need ≥ 0 and ≥ 1m", every, keepClosed)
		}
		o.sweepEvery, o.retention = every, keepClosed
		return nil
	}
}

// WithNotifyClient sends notifications with c instead of the default: HTTP/2
// (cleartext with prior knowledge for http URIs), through the dial guard of
// WithNotifyNetworks, no redirects, no proxy.
func WithNotifyClient(c *http.Client) Option {
	return func(o *options) error {
		o.notifyClient = c
		return nil
	}
}

// WithNotifyNetworks lets notifications reach these networks (the SMFs'),
// on any port. Other destinations must be public addresses on ports 80 or
// 443 (the webhooks' dial guard); loopback opens loopback addresses too,
// for tests. Default: none.
func WithNotifyNetworks(loopback bool, networks ...netip.Prefix) Option {
	return func(o *options) error {
		o.notifyLoopback, o.notifyNetworks = loopback, networks
		return nil
	}
}

// WithNotifyDelivery bounds each notification attempt (timeout), how often
// one is tried and the wait between tries, and how many may wait per
// destination. Defaults 3 s, 5 tries, DefaultNotifyBackoff, 1024.
func WithNotifyDelivery(timeout time.Duration, attempts int, wait backoff.Policy, queue int) Option {
	return func(o *options) error {
		if timeout <= 0 || attempts < 1 || queue < 1 {
			return fmt.Errorf("charging: notify delivery: need a timeout > 0, ≥ 1 attempt and a queue ≥ 1")
		}
		if err := wait.Validate(); err != nil {
			return err
		}
		o.notifyTimeout, o.notifyAttempts, o.notifyBackoff, o.notifyQueue = timeout, attempts, wait, queue
		return nil
	}
}

// WithSessionCache sets how many open sessions the service keeps in memory
// as it last wrote them, so their updates read nothing from SQL (the row
// stays the truth: a step that finds it moved on reads it again). 0 keeps
// none: every step reads its session. Default DefaultSessionCache; beyond
// it, a session's next step reads SQL.
func WithSessionCache(n int) Option {
	return func(o *options) error {
		if n < 0 {
			return fmt.Errorf("charging: session cache must be ≥ 0, got %d", n)
		}
		o.cacheSize = n
		return nil
	}
}

// WithRecordLinger sets how long, under load, the SQL write of a step waits
// for the steps of other sessions to share it: each step's record is an
// UPDATE before its answer, and steps answered at one moment share one
// statement and commit (up to 16). A write lingers only when the one
// before it carried more than one step (steps are arriving together), and
// never past a full statement, so a lone SMF's steps and a quiet system
// wait for nothing. 0: no wait (a write carries what is waiting when it
// starts). Default DefaultRecordLinger; at most 100ms.
func WithRecordLinger(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 || d > 100*time.Millisecond {
			return fmt.Errorf("charging: record linger must be 0 to 100ms, got %s", d)
		}
		o.recordLinger = d
		return nil
	}
}

// WithHooks observes the service (steps, notifications, sweeps).
func WithHooks(h Hooks) Option {
	return func(o *options) error {
		o.hooks = h
		return nil
	}
}

// Hooks are optional observers; nil fields are skipped. They run on the
// request's (or the worker's) goroutine: keep them quick.
type Hooks struct {
	OnStep   func(StepInfo)
	OnNotify func(NotifyInfo)
	OnSweep  func(SweepInfo)
}

// StepInfo describes one answered (or refused) create, update or release.
type StepInfo struct {
	Op         Op
	Ref        string
	FamilyID   int64
	MemberID   int64
	Granted    int64 // bytes granted over the step's rating groups
	Retransmit bool  // answered from the stored answer of the same invocation
	Took       time.Duration
	Err        error
}

// NotifyInfo describes one notification's end: delivered, given up or
// dropped (its destination's queue full).
type NotifyInfo struct {
	Ref       string
	URI       string
	Type      string // NotificationReauthorization or NotificationAbortCharging
	Attempts  int
	Status    int           // the last HTTP status (0: none)
	Latency   time.Duration // from Reauthorize (or the sweep's close) to the end
	Delivered bool
	Dropped   bool
	Err       error
}

// SweepInfo describes one sweep.
type SweepInfo struct {
	Closed int // sessions closed and their grants released
	Failed int // sessions whose release failed (tried again next sweep)
	Purged int64
	Err    error
}
