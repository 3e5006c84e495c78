package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql" // MariaDB
	"github.com/redis/go-redis/v9"
)

// Redis is a redis-server on a loopback port with an append-only file that
// is fsynced on every write, so a SIGKILL loses nothing acknowledged. It can
// be killed and started again on the same port and directory.
type Redis struct {
	Bin  string
	Dir  string // working directory: the AOF and the log
	Port int
	// ReplicaOf, when set ("host port"), starts the server as a replica of
	// that master.
	ReplicaOf string
	// Starts counts the server's starts, Kills its SIGKILLs.
	Starts, Kills int

	proc *Process
}

// NewRedis prepares a redis-server in dir (created) on port; Start starts it.
func NewRedis(bin, dir string, port int) (*Redis, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: redis dir: %w", err)
	}
	return &Redis{Bin: bin, Dir: dir, Port: port}, nil
}

// Addr is host:port.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.Port) }

// LogPath is where the server's output goes.
func (r *Redis) LogPath() string { return filepath.Join(r.Dir, "redis.log") }

// Process is the running server process (nil before Start).
func (r *Redis) Process() *Process { return r.proc }

// Start starts the server on its directory and waits until it answers PING
// (the AOF loaded).
func (r *Redis) Start(ctx context.Context) error { return r.start(ctx, true) }

func (r *Redis) start(ctx context.Context, aof bool) error {
	if r.proc != nil && r.proc.Running() {
		return fmt.Errorf("chaos: redis already running (pid %d)", r.proc.PID())
	}
	appendonly := "yes"
	if !aof {
		appendonly = "no" // dump.rdb is loaded: Redis reads the RDB only without AOF
	}
	args := []string{"--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--dir", r.Dir,
		"--daemonize", "no", "--save", "", "--appendonly", appendonly, "--appendfsync", "always",
		"--auto-aof-rewrite-percentage", "0", "--protected-mode", "no"}
	if r.ReplicaOf != "" {
		args = append(args, "--replicaof", r.ReplicaOf)
	}
	p, err := StartProcess("redis-server", r.LogPath(), nil, r.Bin, args...)
	if err != nil {
		return err
	}
	r.proc = p
	r.Starts++
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	if err := waitFor("redis "+r.Addr(), 60*time.Second, p, func() error { return c.Ping(ctx).Err() }); err != nil {
		return err
	}
	if !aof { // durable again from here on, as the harness's Redis always is
		if err := c.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
			return fmt.Errorf("chaos: redis %s: turn the AOF on: %w", r.Addr(), err)
		}
	}
	return nil
}

// StartFresh starts the server on the same port in the new directory dir
// (created), so nothing of the old directory is loaded: empty when rdb is
// "", else from a copy of the RDB file rdb (a snapshot taken earlier, see
// Snapshot). The AOF is turned on again once the server answers.
func (r *Redis) StartFresh(ctx context.Context, dir, rdb string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("chaos: redis dir: %w", err)
	}
	if rdb != "" {
		if err := copyFile(rdb, filepath.Join(dir, "dump.rdb")); err != nil {
			return fmt.Errorf("chaos: redis snapshot: %w", err)
		}
	}
	r.Dir = dir
	return r.start(ctx, false)
}

// Snapshot has the running server write an RDB snapshot (BGSAVE), waits
// until it is written (LASTSAVE changes and no save is in progress, with a
// deadline) and copies it to dst. It returns when the snapshot was taken.
func (r *Redis) Snapshot(ctx context.Context, dst string) (time.Time, error) {
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	before, err := c.LastSave(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("chaos: redis LASTSAVE: %w", err)
	}
	if err := c.BgSave(ctx).Err(); err != nil {
		return time.Time{}, fmt.Errorf("chaos: redis BGSAVE: %w", err)
	}
	var at int64
	err = waitFor("redis BGSAVE to finish", 60*time.Second, r.proc, func() error {
		if at, err = c.LastSave(ctx).Result(); err != nil {
			return err
		}
		info, err := c.Info(ctx, "persistence").Result()
		if err != nil {
			return err
		}
		switch {
		case strings.Contains(info, "rdb_last_bgsave_status:err"):
			return fmt.Errorf("BGSAVE failed: %s", info)
		case at == before || !strings.Contains(info, "rdb_bgsave_in_progress:0"):
			return fmt.Errorf("LASTSAVE still %d, in progress: %t", at, !strings.Contains(info, "rdb_bgsave_in_progress:0"))
		}
		return nil
	})
	if err != nil {
		return time.Time{}, err
	}
	if err := copyFile(filepath.Join(r.Dir, "dump.rdb"), dst); err != nil {
		return time.Time{}, fmt.Errorf("chaos: redis snapshot: %w", err)
	}
	return time.Unix(at, 0), nil
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// Kill sends SIGKILL to the server and waits for it to exit.
func (r *Redis) Kill() error {
	if r.proc == nil {
		return nil
	}
	r.Kills++
	return r.proc.Kill()
}

// Stop kills the server if it runs (cleanup).
func (r *Redis) Stop() {
	if r.proc != nil {
		r.proc.Kill()
	}
}

// MariaDB is a mariadbd with its own data directory on a loopback port,
// holding the database dpcs and the user dpcs/dpcs (scripts/servers.sh does
// the same). It can be stopped and started again on the same directory and
// port.
type MariaDB struct {
	ServerBin string
	Dir       string // data directory, socket and logs live below it
	Port      int
	// Starts counts the server's starts, Stops its shutdowns.
	Starts, Stops int

	proc *Process
}

// NewMariaDB creates the data directory below dir with mariadb-install-db.
func NewMariaDB(ctx context.Context, installBin, serverBin, dir string, port int) (*MariaDB, error) {
	m := &MariaDB{ServerBin: serverBin, Dir: dir, Port: port}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: mariadb dir: %w", err)
	}
	out, err := exec.CommandContext(ctx, installBin, "--datadir="+m.dataDir(), "--user=root",
		"--auth-root-authentication-method=normal").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("chaos: mariadb-install-db: %w\n%s", err, out)
	}
	return m, nil
}

func (m *MariaDB) dataDir() string { return filepath.Join(m.Dir, "data") }
func (m *MariaDB) socket() string  { return filepath.Join(m.Dir, "s.sock") }

// LogPath is where the server's output goes.
func (m *MariaDB) LogPath() string { return filepath.Join(m.Dir, "server.log") }

// Process is the running server process (nil before Start).
func (m *MariaDB) Process() *Process { return m.proc }

// DSN is the go-sql-driver DSN of the dpcs user and database.
func (m *MariaDB) DSN() string {
	return fmt.Sprintf("dpcs:dpcs@tcp(127.0.0.1:%d)/dpcs?parseTime=true&timeout=5s", m.Port)
}

// Start starts the server, waits until it answers and creates the dpcs
// database and user if they do not exist.
func (m *MariaDB) Start(ctx context.Context) error {
	if m.proc != nil && m.proc.Running() {
		return fmt.Errorf("chaos: mariadb already running (pid %d)", m.proc.PID())
	}
	p, err := StartProcess("mariadbd", m.LogPath(), nil, m.ServerBin, "--no-defaults",
		"--datadir="+m.dataDir(), "--port="+strconv.Itoa(m.Port), "--socket="+m.socket(),
		"--bind-address=127.0.0.1", "--user=root", "--skip-log-bin", "--innodb-buffer-pool-size=256M",
		"--innodb-flush-log-at-trx-commit=2", "--max-connections=500")
	if err != nil {
		return err
	}
	m.proc = p
	m.Starts++
	root, err := sql.Open("mysql", "root@unix("+m.socket()+")/?timeout=2s")
	if err != nil {
		return fmt.Errorf("chaos: mariadb: %w", err)
	}
	defer root.Close()
	if err := waitFor("mariadb :"+strconv.Itoa(m.Port), 60*time.Second, p, func() error { return root.PingContext(ctx) }); err != nil {
		return err
	}
	for _, q := range []string{
		"CREATE DATABASE IF NOT EXISTS dpcs",
		"CREATE USER IF NOT EXISTS 'dpcs'@'127.0.0.1' IDENTIFIED BY 'dpcs'",
		"GRANT ALL ON *.* TO 'dpcs'@'127.0.0.1'",
	} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("chaos: mariadb setup %q: %w", q, err)
		}
	}
	return nil
}

// Stop shuts the server down with SIGTERM (a clean InnoDB shutdown) and
// waits for it to exit.
func (m *MariaDB) Stop() error {
	if m.proc == nil || !m.proc.Running() {
		return errors.New("chaos: mariadb is not running")
	}
	m.Stops++
	return m.proc.Terminate(60 * time.Second)
}

// Kill kills the server if it runs (cleanup).
func (m *MariaDB) Kill() {
	if m.proc != nil {
		m.proc.Kill()
	}
}
