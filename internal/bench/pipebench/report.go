package pipebench

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// Markdown renders the report: the settings, the result table and the
// invariant checker's verdict.
func (r *Report) Markdown(command, setting string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Command: `%s`\n\n%s\n\n", command, setting)
	if r.Ceiling > 0 {
		fmt.Fprintf(&b, "Ceiling (same run, same server): **%s judgements/s** — redis-benchmark feeding the engine's own "+
			"`apply.lua` pipelined (`EVALSHA`, 16 per round trip, 4 connections), full allowed path, a new event id per call.\n\n", thousands(r.Ceiling))
	}
	if c := r.Scripts; c != nil {
		fmt.Fprintf(&b, "Apply script, first version beside the engine's (same run, same server; redis-benchmark as for the ceiling, "+
			"best of alternating rounds; one member with every feature on: daily and monthly limits, night and named windows, "+
			"app and category blocks, throttle, own thresholds; the allowed path):\n\n"+
			"| script | server time per call (commandstats) | Redis CPU per call (INFO cpu) | calls/s |\n|---|---:|---:|---:|\n"+
			"| `apply_v1.lua` (first) | %s | %s | %s |\n| `apply.lua` | %s | %s | %s |\n\n",
			micros(c.Old.PerCall), micros(c.Old.CPUPerCall), thousands(c.Old.Rate),
			micros(c.New.PerCall), micros(c.New.CPUPerCall), thousands(c.New.Rate))
	}
	b.WriteString("| step | offered ev/s | families | proc. | achieved ev/s | ÷ ceiling | produce→decision p50 / p99 / p99.9 | script p50 / p99 (client, per group) | script p50 / p99 / p99.9 (server, per event) | mean poll | busy (engine) | backlog max / end | max lag | write-behind rows/s | persist pending start → end | CPU cores: Redis / bench process / rest (host of N) | RSS |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---|---|---|---:|---|---|---:|---:|---|---|---:|\n")
	for _, s := range r.Steps {
		ratio := "—"
		if r.Ceiling > 0 {
			ratio = fmt.Sprintf("%.2f", s.Throughput/r.Ceiling)
		}
		offered := "max"
		if s.Offered != MaxRate {
			offered = thousands(s.Offered)
		}
		server := "—"
		if s.Server.Calls > 0 {
			server = fmt.Sprintf("%s / %s / %s", us(s.Server.P50), us(s.Server.P99), us(s.Server.P999))
		}
		cpu := "—"
		if c := s.CPU; c.Host > 0 {
			cpu = fmt.Sprintf("%.2f / %.2f / %.2f (%.2f of %d)", c.Redis, c.Process, max(0, c.Host-c.Redis-c.Process), c.Host, c.HostCores)
		} else if c.Redis > 0 || c.Process > 0 {
			cpu = fmt.Sprintf("%.2f / %.2f / —", c.Redis, c.Process)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | **%s** | %s | %s / %s / %s | %s / %s | %s | %.0f | %.0f%% (%.0f%%) | %s / %s | %s | %s | %s → %s | %s | %d MiB |\n",
			s.Label, offered, thousands(float64(s.Families)), s.Processors, thousands(s.Throughput), ratio,
			ms(s.P50), ms(s.P99), ms(s.P999), ms(s.ScriptP50), ms(s.ScriptP99), server, s.MeanBatch, 100*s.ProcessorBusy, 100*s.EngineBusy,
			thousands(float64(s.BacklogMax)), thousands(float64(s.BacklogEnd)), thousands(float64(s.MaxLag)),
			thousands(s.RowsPerSec), thousands(float64(s.PersistPendingStart)), thousands(float64(s.PersistEnd)), cpu, s.RSS>>20)
	}
	b.WriteString("\n")
	if slices.ContainsFunc(r.Steps, func(s Step) bool { return s.Notified > 0 }) {
		b.WriteString("Notifier (in the processor deployables, QUOTA_UPDATED live-only unless stored): notifications handled " +
			"per second beside the step's decisions, and the latency from the usage event's timestamp (stamped when it was " +
			"produced) to a live subscriber of the hub feeding the SSE streams — every kind, and the alerts " +
			"(THRESHOLD_ALERT, CUSTOMER_BLOCKED of the alert families, which have a 2 MiB plan) apart:\n\n" +
			"| step | achieved ev/s | notifications/s | live p50 / p99 (n) | alerts p50 / p99 (n) |\n|---|---:|---:|---|---|\n")
		for _, s := range r.Steps {
			fmt.Fprintf(&b, "| %s | %s | %s | %s / %s (%s) | %s / %s (%s) |\n", s.Label, thousands(s.Throughput), thousands(s.Notified),
				ms(s.LiveP50), ms(s.LiveP99), thousands(float64(s.Live)), ms(s.AlertP50), ms(s.AlertP99), thousands(float64(s.Alerts)))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "Provisioning: %s members in %s.", thousands(float64(r.Members)), r.ProvisionTime.Round(time.Millisecond))
	if r.BytesPerMember > 0 {
		fmt.Fprintf(&b, " Redis memory per member: %.0f bytes provisioned (plan, membership), "+
			"%.0f bytes after the run (with month/day counters and the day's dedupe records).", r.BytesPerMember, r.BytesPerMemberAfter)
	}
	b.WriteString("\n\n")
	if len(r.Steps) > 0 {
		last := r.Steps[0]
		var ds []string
		for d, n := range last.Decisions {
			ds = append(ds, fmt.Sprintf("%s %s", d, thousands(float64(n))))
		}
		slices.Sort(ds)
		fmt.Fprintf(&b, "Decision mix of step %s: %s.\n\n", last.Label, strings.Join(ds, ", "))
	}
	if r.InvariantsErr != nil {
		fmt.Fprintf(&b, "**Invariants FAILED** on %d families: %v\n", r.InvariantsChecked, r.InvariantsErr)
	} else {
		fmt.Fprintf(&b, "Invariants after the run (`recovery.CheckInvariants` on %d families sampled across the populations, "+
			"and one usage_record row per event id over the whole table): **pass**.\n", r.InvariantsChecked)
	}
	return b.String()
}

func us(d time.Duration) string {
	return fmt.Sprintf("%.0f µs", float64(d)/1e3)
}

func ms(d time.Duration) string {
	switch {
	case d == 0:
		return "—"
	case d < time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0f ms", float64(d)/1e6)
}

func thousands(f float64) string {
	n := int64(math.Round(f))
	neg := n < 0
	if neg {
		n = -n
	}
	s := fmt.Sprint(n)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// SVG draws achieved throughput and p99 produce→decision latency against the
// offered rate for the given steps (the rate ladder), with the ceiling and
// the goals as reference lines.
func (r *Report) SVG(steps []Step, goalP99 time.Duration) string {
	const w, h, pad, gap = 920, 380, 60, 80
	pw := (w - 2*pad - gap) / 2
	ph := h - 2*pad
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	n := len(steps)
	if n == 0 {
		b.WriteString("</svg>\n")
		return b.String()
	}
	xAt := func(x0, i int) float64 {
		if n == 1 {
			return float64(x0) + float64(pw)/2
		}
		return float64(x0) + 20 + float64(i)*float64(pw-40)/float64(n-1)
	}
	label := func(s Step) string {
		if s.Offered == MaxRate {
			return "max"
		}
		return thousands(s.Offered)
	}
	// Left: throughput.
	top := 1.0
	for _, s := range steps {
		top = max(top, s.Throughput, s.Offered)
	}
	if r.Ceiling > 0 {
		top = max(top, r.Ceiling)
	}
	top *= 1.1
	x0, y0 := pad, pad
	panel(&b, x0, y0, pw, ph, "achieved events/s vs offered", top, false)
	yOf := func(v float64) float64 { return float64(y0+ph) - v/top*float64(ph) }
	if r.Ceiling > 0 {
		refLine(&b, x0, pw, yOf(r.Ceiling), "#c00", "ceiling "+thousands(r.Ceiling))
		refLine(&b, x0, pw, yOf(0.6*r.Ceiling), "#e80", "60% goal")
	}
	var pts []string
	for i, s := range steps {
		x, y := xAt(x0, i), yOf(s.Throughput)
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="#06c"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
			x, y, x, y-8, thousands(s.Throughput))
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, y0+ph+16, label(s))
	}
	fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#06c" stroke-width="2"/>`+"\n", strings.Join(pts, " "))
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">offered events/s</text>`+"\n", x0+pw/2, y0+ph+34)

	// Right: p99 latency, log scale from 0.1 ms.
	x0 = pad + pw + gap
	maxMs := goalP99.Seconds() * 1000 * 2
	for _, s := range steps {
		maxMs = max(maxMs, s.P99.Seconds()*1000)
	}
	lo, hi := math.Log10(0.1), math.Log10(maxMs*1.5)
	panel(&b, x0, y0, pw, ph, "p99 produce→decision (ms, log)", 0, true)
	yMs := func(v float64) float64 {
		v = max(v, 0.1)
		return float64(y0+ph) - (math.Log10(v)-lo)/(hi-lo)*float64(ph)
	}
	for _, t := range []float64{0.1, 1, 10, 100, 1000, 10000, 100000} {
		if math.Log10(t) <= hi {
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", x0-4, yMs(t)+4, t)
		}
	}
	refLine(&b, x0, pw, yMs(goalP99.Seconds()*1000), "#e80", "goal "+ms(goalP99))
	pts = pts[:0]
	for i, s := range steps {
		v := s.P99.Seconds() * 1000
		x, y := xAt(x0, i), yMs(v)
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="#393"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
			x, y, x, y-8, ms(s.P99))
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, y0+ph+16, label(s))
	}
	fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#393" stroke-width="2"/>`+"\n", strings.Join(pts, " "))
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">offered events/s</text>`+"\n", x0+pw/2, y0+ph+34)
	b.WriteString("</svg>\n")
	return b.String()
}

func panel(b *strings.Builder, x0, y0, pw, ph int, title string, top float64, logScale bool) {
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", x0, y0, pw, ph)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" font-weight="bold">%s</text>`+"\n", x0+pw/2, y0-12, title)
	if logScale {
		return
	}
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		y := float64(y0+ph) - float64(i)/4*float64(ph)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-4, y+4, thousands(v))
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x0, x0+pw, y, y)
	}
}

func refLine(b *strings.Builder, x0, pw int, y float64, color, text string) {
	fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="6,4"/>`+"\n", x0, x0+pw, y, y, color)
	fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="%s">%s</text>`+"\n", x0+pw-4, y-4, color, text)
}

// ReplaceSection replaces the text between the begin and end markers of
// the file at path with body (markers kept), or appends the markers and
// body when absent.
func ReplaceSection(path, begin, end, body string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	block := begin + "\n" + body + end
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i >= 0 && j > i {
		s = s[:i] + block + s[j+len(end):]
	} else {
		if s != "" && !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		s += "\n" + block + "\n"
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

// micros formats d in microseconds with one decimal.
func micros(d time.Duration) string {
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}
