package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// result is one measured step of one target.
type result struct {
	target, step string
	per          int // decisions per call
	w            window
	procs        []proc
	cpu          []time.Duration
	// authorised is the bytes granted over the window (the grant path;
	// 0 for the others).
	authorised int64
	// overshoot is the most bytes a pool went below 0, read after the
	// step when overshootRead (the CGRateS peer reads its balances).
	overshoot     int64
	overshootRead bool
	// usedUp is how many pools had less than one grant left after the
	// step (DPCS's grant path; 0 for the others).
	usedUp int
}

// bytesPerCPUSecond is the bytes authorised per second of the servers'
// CPU: granted bytes for the grant path, perChunk bytes per decision for
// the others.
func (r result) bytesPerCPUSecond(perChunk int64) float64 {
	cpu := r.servers() * float64(r.decisions()) / 1e6 // seconds
	if cpu <= 0 {
		return 0
	}
	b := r.authorised
	if b == 0 {
		b = perChunk * r.decisions()
	}
	return float64(b) / cpu
}

func (r result) decisions() int64 { return (r.w.Calls - r.w.Errors) * int64(r.per) }

func (r result) perSecond() float64 {
	if r.w.Elapsed <= 0 {
		return 0
	}
	return float64(r.decisions()) / r.w.Elapsed.Seconds()
}

// cpuPer is process i's CPU per decision, in µs.
func (r result) cpuPer(i int) float64 {
	d := r.decisions()
	if d == 0 {
		return 0
	}
	return float64(r.cpu[i].Microseconds()) / float64(d)
}

// servers is the CPU per decision of every process but the load generator.
func (r result) servers() float64 {
	var s float64
	for i, p := range r.procs {
		if p.PID != os.Getpid() {
			s += r.cpuPer(i)
		}
	}
	return s
}

func (r result) cpuText() string {
	var parts []string
	for i, p := range r.procs {
		parts = append(parts, fmt.Sprintf("%s %.1f", p.Name, r.cpuPer(i)))
	}
	return strings.Join(parts, ", ")
}

func (r result) line() string {
	return fmt.Sprintf("  %s decisions/s, p50 %s p99 %s p99.9 %s, %d errors; CPU µs/decision: %s",
		thousands(r.perSecond()), ms(percentile(r.w.lat, .5)), ms(percentile(r.w.lat, .99)), ms(percentile(r.w.lat, .999)),
		r.w.Errors, r.cpuText())
}

// report is the run's results.
type report struct {
	cfg     config
	started time.Time
	results []result
	// onWindow, when set, is called as each step's measured window opens.
	onWindow func(ctx context.Context, step string, d time.Duration)
	// settle, when set, is called before each step: it returns once the
	// consumers have read what the earlier steps produced.
	settle func(ctx context.Context) error
	// ceiling is the engine script's redis-benchmark rate on the same
	// server in this run (-pipebench), ceilingCmd its command; 0 when not
	// measured.
	ceiling    float64
	ceilingCmd string
	// script is the engine's apply script's server time and Redis CPU per
	// call, then its first version's, in µs (pipebench's CompareScripts).
	script [4]float64
	// contended is the CGRateS peer's contention check (nil: not run).
	contended *contention
	// dpcsContended is the DPCS grant path's contention check (nil: not
	// run).
	dpcsContended *poolContention
	// serverRSS is the DPCS server's peak resident memory over its steps
	// (0: not measured).
	serverRSS int64
	// rest is the processor deployable's servers at rest (nil: no
	// pipeline steps).
	rest *atRest
}

// atRest is the CPU the processor deployable's servers spend with no event
// coming, over elapsed.
type atRest struct {
	procs   []proc
	cpu     []time.Duration
	elapsed time.Duration
}

// perSecond is process i's CPU at rest, in ms per second.
func (a *atRest) perSecond(i int) float64 {
	if a.elapsed <= 0 {
		return 0
	}
	return float64(a.cpu[i].Microseconds()) / 1e3 / a.elapsed.Seconds()
}

// servers is every process's but the load generator's, in ms per second.
func (a *atRest) servers() float64 {
	var s float64
	for i, p := range a.procs {
		if p.PID != os.Getpid() {
			s += a.perSecond(i)
		}
	}
	return s
}

// each is every server's CPU at rest, named: "DPCS processor 18.0, …".
func (a *atRest) each() string {
	var parts []string
	for i, p := range a.procs {
		if p.PID != os.Getpid() {
			parts = append(parts, fmt.Sprintf("%s %.1f", p.Name, a.perSecond(i)))
		}
	}
	return strings.Join(parts, ", ")
}

func (a *atRest) text() string {
	return fmt.Sprintf("servers' CPU at rest: %.1f ms a second (%s)", a.servers(), a.each())
}

// restShare is what the servers at rest cost each event of res, in µs.
func (a *atRest) restShare(res result) float64 {
	if res.perSecond() <= 0 {
		return 0
	}
	return a.servers() * 1e3 / res.perSecond()
}

func (r *report) markdown(args string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on this machine (%d cores, %s): every server a process of its own, driven by one load generator in its own process.\n\n",
		r.started.UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), cpuModel())
	fmt.Fprintf(&b, "```sh\nmake bench-peers   # or, on servers of its own:\n(cd bench/peers && go build -o /tmp/peers .) && /tmp/peers %s\n```\n\n", redact(args))
	fmt.Fprintf(&b, "%s families, %s members; each step %s after %s of warmup; latency per call (at the fixed rate counted from each call's scheduled time).\n\n",
		thousands(float64(r.cfg.families)), thousands(float64(r.cfg.families*4)), r.cfg.duration, r.cfg.warmup)
	b.WriteString("| target | step | decisions/s | p50 | p99 | p99.9 | errors | servers' CPU µs per decision | of which |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, res := range r.results {
		var of []string
		for i, p := range res.procs {
			if p.PID != os.Getpid() {
				of = append(of, fmt.Sprintf("%s %.1f", p.Name, res.cpuPer(i)))
			}
		}
		load := 0.0
		for i, p := range res.procs {
			if p.PID == os.Getpid() {
				load = res.cpuPer(i)
			}
		}
		of = append(of, fmt.Sprintf("(load generator %.1f)", load))
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %d | %.1f | %s |\n", res.target, res.step, thousands(res.perSecond()),
			ms(percentile(res.w.lat, .5)), ms(percentile(res.w.lat, .99)), ms(percentile(res.w.lat, .999)), res.w.Errors,
			res.servers(), strings.Join(of, ", "))
	}
	var grants []result
	var single *result
	for i, res := range r.results {
		if res.authorised > 0 {
			grants = append(grants, res)
		}
		if strings.HasPrefix(res.target, "DPCS `POST /decisions`") && res.per == 1 && strings.HasPrefix(res.step, "closed loop") {
			single = &r.results[i]
		}
	}
	if len(grants) > 0 {
		b.WriteString("\nThe grant path (each call one update: the whole last grant reported used, the next asked for), beside `POST /decisions` (each decision a 1 KiB chunk):\n\n")
		b.WriteString("| step | updates/s | p99 | servers' CPU µs per update | ÷ one `POST /decisions` | bytes authorised per CPU-second | largest pool overshoot |\n|---|---:|---:|---:|---:|---:|---:|\n")
		for _, g := range grants {
			ratio := "—"
			if single != nil && single.servers() > 0 {
				ratio = fmt.Sprintf("%.2f×", g.servers()/single.servers())
			}
			label, over := g.step, "not read"
			if !strings.HasPrefix(g.target, "DPCS") {
				label = g.target + ", " + g.step
			}
			if g.overshootRead {
				over = thousands(float64(g.overshoot)) + " bytes"
				if strings.HasPrefix(g.target, "DPCS") {
					over += fmt.Sprintf(" (%s of %s pools with less than a grant left)", thousands(float64(g.usedUp)), thousands(float64(r.cfg.families)))
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.1f | %s | %s MiB | %s |\n", label, thousands(g.perSecond()), ms(percentile(g.w.lat, .99)),
				g.servers(), ratio, thousands(g.bytesPerCPUSecond(0)/(1<<20)), over)
		}
		if single != nil {
			fmt.Fprintf(&b, "| `POST /decisions`, %s, 1 KiB chunks | %s | %s | %.1f | 1.00× | %s MiB | — |\n", single.step,
				thousands(single.perSecond()), ms(percentile(single.w.lat, .99)), single.servers(), thousands(single.bytesPerCPUSecond(1024)/(1<<20)))
		}
	}
	if c := r.dpcsContended; c != nil {
		b.WriteString("\n" + c.sentence() + "\n")
	}
	if c := r.contended; c != nil {
		if c.failed != "" {
			fmt.Fprintf(&b, "\nCGRateS, every caller on one family's four members (a 1 GiB shared balance, 10 MiB grants, locking_timeout %s): **most calls of a 2 s round failed** after %s calls (%d failed; the first: `%s`), %s bytes granted, %s bytes left in the balance; overshoot %s bytes.\n",
				c.lockingTimeout, thousands(float64(c.calls)), c.errors, c.failed, thousands(float64(c.granted)), thousands(float64(c.left)),
				thousands(float64(c.overshoot)))
		} else if c.stalled {
			fmt.Fprintf(&b, "\nCGRateS, every caller on one family's four members (a 1 GiB shared balance, 10 MiB grants, locking_timeout %s): **SessionS stopped answering** (a 2 s round with no call answered) after %s calls, %s bytes granted, %s bytes left in the balance; overshoot %s bytes.\n",
				c.lockingTimeout, thousands(float64(c.calls)), thousands(float64(c.granted)), thousands(float64(c.left)), thousands(float64(c.overshoot)))
		} else {
			fmt.Fprintf(&b, "\nCGRateS, every caller on one family's four members (a 1 GiB shared balance, 10 MiB grants, until it granted no more): %s calls, %d failed; %s bytes granted, %s bytes left in the balance; overshoot %s bytes. Over the whole run the pools lost %s bytes more than the answers granted: calls cut off at a step's end after their debit, and reservations terminated unused that did not go back to the shared balance.\n",
				thousands(float64(c.calls)), c.errors, thousands(float64(c.granted)), thousands(float64(c.left)), thousands(float64(c.overshoot)),
				thousands(float64(c.unreturned)))
		}
	}
	if r.serverRSS > 0 {
		fmt.Fprintf(&b, "\nThe DPCS server's peak resident memory over its steps: %.0f MiB.\n", float64(r.serverRSS)/(1<<20))
	}
	// Ratios of the single-decision closed loops, in this run.
	closed := map[string]float64{}
	var names []string
	for _, res := range r.results {
		if res.per == 1 && strings.HasPrefix(res.step, "closed loop") {
			// A target with a closed loop per grant size has a row for each.
			name := res.target
			if _, size, ok := strings.Cut(res.step, " callers, "); ok {
				name += ", " + size
			}
			closed[name] = res.perSecond()
			names = append(names, name)
		}
	}
	var base string
	for _, n := range names {
		if strings.HasPrefix(n, "trivial Redis script") {
			base = n
		}
	}
	if base != "" && len(names) > 1 {
		b.WriteString("\nOne decision per call, closed loop, as a ratio to the trivial script's throughput in the same run:\n\n| target | decisions/s | ÷ trivial script |\n|---|---:|---:|\n")
		for _, n := range names {
			fmt.Fprintf(&b, "| %s | %s | %.2f× |\n", n, thousands(closed[n]), closed[n]/closed[base])
		}
	}
	r.restText(&b)
	if r.ceiling > 0 {
		fmt.Fprintf(&b, "\nThe engine's ceiling on the same redis-server in this run: **%s judgements/s** (redis-benchmark feeding `apply.lua` pipelined, the full allowed path of a member with every feature on; `pipebench -ceiling-only`).\n",
			thousands(r.ceiling))
		for _, res := range r.results {
			if strings.HasPrefix(res.target, "DPCS processor") && res.step == "as fast as it judges" {
				fmt.Fprintf(&b, "The processor deployable, as fast as it judges: %s events/s = **%.2f of the ceiling**.\n",
					thousands(res.perSecond()), res.perSecond()/r.ceiling)
			}
		}
		if r.script[0] > 0 {
			fmt.Fprintf(&b, "The engine's apply script on the same server (redis-benchmark, its best of three rounds): **%.1f µs of server time per call** (`INFO commandstats`), %.1f µs of Redis CPU; its first version %.1f µs (%.1f).\n",
				r.script[0], r.script[1], r.script[2], r.script[3])
		}
		fmt.Fprintf(&b, "\nCeiling command: `%s`\n", r.ceilingCmd)
	}
	return b.String()
}

// redact hides the password of a DSN in args.
func redact(args string) string {
	f := strings.Fields(args)
	for i, a := range f {
		if at := strings.Index(a, "@tcp("); at > 0 {
			if c := strings.IndexByte(a, ':'); c > 0 && c < at {
				f[i] = a[:c+1] + "…" + a[at:]
			}
		}
	}
	return strings.Join(f, " ")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func ms(d time.Duration) string {
	if d == 0 {
		return "—"
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

// thousands formats a rounded number with thousands separators.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// replaceSection replaces what lies between the markers begin and end in the
// file at path with md (appending the markers and md when absent).
func replaceSection(path, begin, end, md string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	block := begin + "\n" + md + end
	i, j := bytes.Index(old, []byte(begin)), bytes.Index(old, []byte(end))
	var out []byte
	if i >= 0 && j > i {
		out = append(append(append([]byte{}, old[:i]...), block...), old[j+len(end):]...)
	} else {
		out = append(append(append([]byte{}, old...), '\n'), block+"\n"...)
	}
	return os.WriteFile(path, out, 0o644)
}

// restText says what the processor deployable's servers spend at rest and
// what share of each event that is at the fixed rate and flat out: the
// part of the fixed-rate step's cost that does not go with the events.
func (r *report) restText(b *strings.Builder) {
	a := r.rest
	if a == nil {
		return
	}
	var fixed, flat *result
	for i, res := range r.results {
		if !strings.HasPrefix(res.target, "DPCS processor") {
			continue
		}
		if res.step == "as fast as it judges" {
			flat = &r.results[i]
		} else {
			fixed = &r.results[i]
		}
	}
	fmt.Fprintf(b, "\nThe processor deployable at rest (nothing produced, %s): its servers spend **%.1f ms of CPU a second** (%s).",
		a.elapsed.Round(time.Second), a.servers(), a.each())
	if fixed == nil || flat == nil || fixed.servers() <= 0 || flat.servers() <= 0 {
		b.WriteString("\n")
		return
	}
	fr, lr := a.restShare(*fixed), a.restShare(*flat)
	fmt.Fprintf(b, " That is %.1f of the %.1f µs per event at %s events/s and %.1f of the %.1f flat out: the fixed-rate step costs %.2f× the flat-out one",
		fr, fixed.servers(), thousands(fixed.perSecond()), lr, flat.servers(), fixed.servers()/flat.servers())
	if fixed.servers() > fr && flat.servers() > lr {
		fmt.Fprintf(b, ", and %.2f× less what the servers spend at rest", (fixed.servers()-fr)/(flat.servers()-lr))
	}
	b.WriteString(".\n")
}
