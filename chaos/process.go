package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a child OS process started by the harness, its stdout and
// stderr appended to a log file. Stops the harness asks for (Kill,
// Terminate) are expected; any other exit is reported by Unexpected.
type Process struct {
	Name    string
	LogPath string

	cmd     *exec.Cmd
	log     *os.File
	done    chan struct{}
	mu      sync.Mutex
	waitErr error
	asked   bool // Kill or Terminate was called
	started time.Time
	exited  time.Time
}

// StartProcess starts bin with args and the environment env (nil: the
// harness's own), appending its output to logPath. The child gets SIGKILL
// if the harness dies first (Linux parent-death signal), so a crashed test
// leaves no servers behind.
func StartProcess(name, logPath string, env []string, bin string, args ...string) (*Process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("chaos: %s log: %w", name, err)
	}
	fmt.Fprintf(f, "=== %s: start %s %v at %s\n", name, bin, args, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("chaos: start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, log: f, done: make(chan struct{}), started: time.Now()}
	go func() { // ends when the child does
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr, p.exited = err, time.Now()
		p.mu.Unlock()
		fmt.Fprintf(f, "=== %s: exited (%v) at %s\n", name, err, time.Now().Format(time.RFC3339Nano))
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the child's process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed once the child has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Running reports whether the child has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL to the child (by its PID) and waits for it to exit.
func (p *Process) Kill() error {
	p.mu.Lock()
	p.asked = true
	p.mu.Unlock()
	if !p.Running() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("chaos: kill %s (pid %d): %w", p.Name, p.PID(), err)
	}
	<-p.done
	return nil
}

// Terminate sends SIGTERM and waits up to grace for a clean exit, then
// kills. It returns an error if the child had to be killed or exited with a
// failure status.
func (p *Process) Terminate(grace time.Duration) error {
	p.mu.Lock()
	p.asked = true
	p.mu.Unlock()
	if !p.Running() {
		return p.Err()
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("chaos: terminate %s (pid %d): %w", p.Name, p.PID(), err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return p.Err()
	case <-t.C:
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("chaos: %s (pid %d) did not stop within %s of SIGTERM; killed", p.Name, p.PID(), grace)
	}
}

// Err is the child's exit error (nil while running or after a clean exit).
func (p *Process) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waitErr != nil {
		return fmt.Errorf("chaos: %s (pid %d): %w", p.Name, p.cmd.Process.Pid, p.waitErr)
	}
	return nil
}

// Unexpected reports an exit nobody asked for.
func (p *Process) Unexpected() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.asked || p.exited.IsZero() {
		return nil
	}
	return fmt.Errorf("%s (pid %d) exited on its own after %s: %v (log %s)",
		p.Name, p.cmd.Process.Pid, p.exited.Sub(p.started).Round(time.Millisecond), p.waitErr, p.LogPath)
}

// Tail returns the last n lines of a log file.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	b = bytes.TrimRight(b, "\n")
	for i, k := len(b)-1, 0; i >= 0; i-- {
		if b[i] == '\n' {
			if k++; k == n {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}

// FreePorts returns n distinct loopback ports that were free a moment ago
// (listened on together, then closed). They are drawn from 10000–19999,
// below Linux's ephemeral range (32768–60999 by default): a server stopped
// for a fault is started again on its port, and while it is down a port of
// the ephemeral range can be taken by any outgoing connection, the
// processors' own reconnects included; one below only by an explicit listen.
func FreePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := listenLow()
		if err != nil {
			return nil, fmt.Errorf("chaos: free port: %w", err)
		}
		lns = append(lns, l)
		_, p, _ := net.SplitHostPort(l.Addr().String())
		port, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("chaos: free port: %w", err)
		}
		ports = append(ports, port)
	}
	return ports, nil
}

// listenLow listens on a free loopback port of 10000–19999, or on any free
// one when a hundred draws from there were all taken.
func listenLow() (net.Listener, error) {
	for range 100 {
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 10000+rand.IntN(10000))); err == nil {
			return l, nil
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// waitFor calls ready every 100 ms until it returns nil, the process p (if
// not nil) exits, or timeout passes; the error names what and the last
// failure.
func waitFor(what string, timeout time.Duration, p *Process, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if p != nil && !p.Running() {
			return fmt.Errorf("chaos: %s exited before it was ready: %v; last check: %v\n%s", p.Name, p.Err(), err, Tail(p.LogPath, 20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: %s not ready within %s: %w", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// CountLines counts the lines of the files that contain every one of subs.
func CountLines(paths []string, subs ...string) int { return len(GrepLines(paths, subs...)) }

// GrepLines returns the lines of the files that contain every one of subs.
func GrepLines(paths []string, subs ...string) []string {
	var out []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
	lines:
		for line := range bytes.Lines(b) {
			for _, s := range subs {
				if !bytes.Contains(line, []byte(s)) {
					continue lines
				}
			}
			out = append(out, string(bytes.TrimRight(line, "\n")))
		}
	}
	return out
}

// Fields picks the key=value pairs of the named keys from a log line written
// by slog's text handler, in the order given ("families=3000 drain=3.2s").
func Fields(line string, keys ...string) string {
	var out []string
	for _, k := range keys {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, k+"=") {
				out = append(out, f)
				break
			}
		}
	}
	return strings.Join(out, " ")
}
