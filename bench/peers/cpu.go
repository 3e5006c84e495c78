package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTick is Linux's USER_HZ, the unit of /proc/<pid>/stat's times (100
// on every architecture Go runs on Linux with).
const clockTick = 10 * time.Millisecond

// cpuTime returns the user + system CPU time pid has used, all threads.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	return parseStat(b)
}

// parseStat reads utime and stime (fields 14 and 15) of a /proc/<pid>/stat
// line; the command name (field 2) may hold spaces and parentheses, so the
// fields are counted after its last ')'.
func parseStat(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat: no command name in %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the name", len(f))
	}
	u, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc stat utime: %w", err)
	}
	s, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc stat stime: %w", err)
	}
	return time.Duration(u+s) * clockTick, nil
}

// findProcess returns the pid of the only process whose command (comm) is
// one of names and whose command line holds arg ("": any), or 0 when there
// is none or more than one.
func findProcess(arg string, names ...string) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	found := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || !slices.Contains(names, strings.TrimSpace(string(comm))) {
			continue
		}
		if arg != "" {
			cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err != nil || !slices.Contains(strings.Split(string(cmdline), "\x00"), arg) {
				continue
			}
		}
		if found != 0 {
			return 0
		}
		found = pid
	}
	return found
}

// findMariaDB returns the pid of the MariaDB (or MySQL) server dsn names:
// the only one running, or the only one started with --port=<dsn's port>
// when several are (0: not found).
func findMariaDB(dsn string) int {
	if pid := findProcess("", "mariadbd", "mysqld"); pid != 0 {
		return pid
	}
	_, addr, ok := strings.Cut(dsn, "tcp(")
	if addr, _, ok2 := strings.Cut(addr, ")"); ok && ok2 {
		if _, port, err := net.SplitHostPort(addr); err == nil {
			return findProcess("--port="+port, "mariadbd", "mysqld")
		}
	}
	return 0
}

// proc is a process whose CPU a step charges to its decisions.
type proc struct {
	Name string
	PID  int
}

// meter reads the CPU of procs at a step's start and end.
type meter struct {
	procs  []proc
	start  []time.Duration
	spent  []time.Duration
	marked int
	err    error
}

func newMeter(procs []proc) *meter {
	return &meter{procs: procs, start: make([]time.Duration, len(procs)), spent: make([]time.Duration, len(procs))}
}

// mark reads every process's CPU: the first call starts, the second ends.
func (m *meter) mark() {
	for i, p := range m.procs {
		t, err := cpuTime(p.PID)
		if err != nil && m.err == nil {
			m.err = fmt.Errorf("%s (pid %d): %w", p.Name, p.PID, err)
		}
		if m.marked == 0 {
			m.start[i] = t
		} else {
			m.spent[i] = t - m.start[i]
		}
	}
	m.marked++
}

// peakRSS returns the most resident memory pid has had (VmHWM), in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	return parseHWM(b)
}

// parseHWM reads the VmHWM line ("VmHWM:   123456 kB") of /proc/<pid>/status.
func parseHWM(b []byte) (int64, error) {
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				break
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc status: no VmHWM line in %q", b)
}
