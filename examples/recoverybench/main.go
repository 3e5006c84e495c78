// Command recoverybench measures how long DPCS takes to rebuild Redis from
// SQL: it seeds a database of its own (dpcs_recoverybench, dropped and created
// again on the -mysql server) with 100,000 families and their usage history
// in bulk, empties the Redis server (FLUSHALL), then times
// recovery.Rebuild over every family, the same one family per call for
// -per-family of them, and a whole recovery.Guard.RebuildNow (Kafka in
// process), and prints the figures (and writes them into -doc).
//
//	go run ./examples/recoverybench -redis 127.0.0.1:26379 \
//	  -mysql 'dpcs:dpcs@tcp(127.0.0.1:23306)/dpcs?parseTime=true'
//
// `make bench` starts the servers and runs it. Point it at servers of its own.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/internal/bench/pipebench"
	"github.com/dabom/dpcs/internal/bench/recoverybench"
	"github.com/dabom/dpcs/internal/buildinfo"
	"github.com/dabom/dpcs/quota"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "recoverybench:", err)
		os.Exit(1)
	}
}

const database = "dpcs_recoverybench"

func run(ctx context.Context, args []string) error {
	if buildinfo.Asked(args) {
		return buildinfo.Print(os.Stdout, "dpcs recoverybench")
	}
	fs := flag.NewFlagSet("recoverybench", flag.ContinueOnError)
	fs.Bool("version", false, "print the version and exit")
	addr := fs.String("redis", "", "redis-server address (emptied with FLUSHALL)")
	dsn := fs.String("mysql", "", "MariaDB/MySQL DSN; the database "+database+" is dropped and created on its server")
	var pop recoverybench.Population
	fs.IntVar(&pop.Families, "families", 100_000, "families to seed")
	fs.IntVar(&pop.RowsPerFamily, "rows", 20, "usage_record rows per family")
	fs.IntVar(&pop.History, "history", 0, "usage_record rows per family in the year before the current month")
	perFamily := fs.Int("per-family", 10_000, "families also rebuilt one call each, for the ratio (0: none)")
	quiet := fs.Duration("quiet", 0, "recovery drain quiet period (0: the recovery's default, 3s)")
	doc := fs.String("doc", "", "write the figures into this markdown file (the recovery section)")
	seedOnly := fs.Bool("seed-only", false, "seed the database and exit (bench/peers serves it with the server deployable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" || *dsn == "" {
		return fmt.Errorf("-redis and -mysql are required")
	}
	db, err := openDatabase(ctx, *dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	defer rdb.Close()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return fmt.Errorf("flushall: %w", err)
	}
	eng, err := quota.New(rdb)
	if err != nil {
		return err
	}
	say := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	say("seeding %d families", pop.Families)
	seeded, err := recoverybench.Seed(ctx, db, eng, pop)
	if err != nil {
		return err
	}
	say("seeded %d rows in %s", seeded.Rows(), seeded.Took.Round(time.Millisecond))
	if *seedOnly {
		return nil
	}
	rep, err := recoverybench.Run(ctx, db, rdb, eng, recoverybench.Config{PerFamily: *perFamily, Quiet: *quiet, Progress: say})
	if err != nil {
		return err
	}
	cmd := "make bench   # or, on servers of its own:\ngo run ./examples/recoverybench " + strings.Join(redact(args), " ")
	setting := fmt.Sprintf("Measured %s on this machine: real redis-server, MariaDB, Kafka in process (kfake).",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	md := rep.Markdown(seeded, cmd, setting)
	fmt.Println(md)
	if *doc != "" {
		return pipebench.ReplaceSection(*doc, "<!-- recovery:begin -->", "<!-- recovery:end -->", md)
	}
	return nil
}

// openDatabase drops and creates the bench's own database on dsn's server.
func openDatabase(ctx context.Context, dsn string) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("-mysql: %w", err)
	}
	cfg.ParseTime = true
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	for _, s := range []string{"DROP DATABASE IF EXISTS " + database, "CREATE DATABASE " + database} {
		if _, err := admin.ExecContext(ctx, s); err != nil {
			return nil, fmt.Errorf("%s: %w", s, err)
		}
	}
	cfg.DBName = database
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	return db, nil
}

// redact hides the DSN's password in the printed command.
func redact(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if cfg, err := mysql.ParseDSN(a); err == nil && cfg.Passwd != "" && strings.Contains(a, "@") {
			cfg.Passwd = "…"
			a = "'" + cfg.FormatDSN() + "'"
		}
		out[i] = a
	}
	return out
}
