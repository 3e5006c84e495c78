package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/service/store"
)

// Password bounds of `admin create`: long enough to resist guessing, and
// bcrypt reads at most 72 bytes.
const (
	minAdminPassword = 12
	maxAdminPassword = 72
)

// admin runs `server admin create --name NAME --phone PHONE [--role
// ADMIN|AGENT] [--password-file PATH | --password-env VAR]`: it creates a
// back-office admin (or, --role AGENT, a care agent who reads what an
// admin reads and changes nothing) in the configured SQL store (DPCS_MYSQL_DSN, else the SQLite file;
// no Kafka or Redis needed) with the password the operator gives, and prints
// the new admin's id. The password comes from the file, the variable named
// (never a default), or else stdin: typed without echo (twice) on a
// terminal, else its first line. It is never printed. A phone already in
// use by a current member or admin is refused.
func admin(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "create" {
		return errors.New("admin: usage: server admin create --name NAME --phone PHONE [--role ADMIN|AGENT] [--password-file PATH | --password-env VAR]")
	}
	fs := flag.NewFlagSet("admin create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "the admin's name (required)")
	phone := fs.String("phone", "", "the admin's phone, its login besides its id (required)")
	file := fs.String("password-file", "", "read the password from this file (its first line)")
	envVar := fs.String("password-env", "", "read the password from this environment variable")
	role := fs.String("role", string(policy.RoleAdmin), "ADMIN, or AGENT: a care agent who reads what an admin reads and changes nothing")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("admin create: %w", err)
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("admin create: unexpected argument %q", fs.Arg(0))
	case strings.TrimSpace(*name) == "":
		return errors.New("admin create: --name is required")
	case strings.TrimSpace(*phone) == "":
		return errors.New("admin create: --phone is required")
	case *file != "" && *envVar != "":
		return errors.New("admin create: give --password-file or --password-env, not both")
	case !policy.Role(*role).BackOffice():
		return fmt.Errorf("admin create: --role must be ADMIN or AGENT, got %q", *role)
	}
	password, err := adminPassword(*file, *envVar, getenv, stdin, stderr)
	if err != nil {
		return fmt.Errorf("admin create: %w", err)
	}
	if n := len(password); n < minAdminPassword || n > maxAdminPassword {
		return fmt.Errorf("admin create: the password must be %d to %d bytes, got %d", minAdminPassword, maxAdminPassword, n)
	}

	cfg, err := service.LoadSystemConfig(getenv)
	if err != nil {
		return err
	}
	db, err := cfg.SQL(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := store.Migrate(ctx, db); err != nil {
		return err
	}
	st, err := store.New(db, store.WithLocation(cfg.Zone))
	if err != nil {
		return err
	}
	switch m, err := st.MemberByPhone(ctx, *phone); {
	case err == nil:
		return fmt.Errorf("admin create: phone %s is already %s %d's; nothing created", *phone, strings.ToLower(string(m.Role)), m.ID)
	case !errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("admin create: %w", err)
	}
	m, err := st.AddMember(ctx, store.NewMember{Name: *name, Phone: *phone, Role: policy.Role(*role), Password: password}, store.System)
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("admin create: phone %s is already in use; nothing created", *phone)
	}
	if err != nil {
		return fmt.Errorf("admin create: %w", err)
	}
	what := "admin"
	if m.Role == policy.RoleAgent {
		what = "care agent"
	}
	fmt.Fprintf(stdout, "%s %d created (log in with %d or %s)\n", what, m.ID, m.ID, m.Phone)
	return nil
}

// adminPassword reads the password from the file, the variable or stdin.
func adminPassword(file, envVar string, getenv func(string) string, stdin io.Reader, prompt io.Writer) (string, error) {
	switch {
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("--password-file: %w", err)
		}
		defer f.Close()
		return firstLine(f)
	case envVar != "":
		p := getenv(envVar)
		if p == "" {
			return "", fmt.Errorf("--password-env: %s is empty or not set", envVar)
		}
		return p, nil
	}
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(prompt, "password (not shown): ")
		p, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(prompt)
		if err != nil {
			return "", fmt.Errorf("read password: %w", err)
		}
		fmt.Fprint(prompt, "again: ")
		again, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(prompt)
		if err != nil {
			return "", fmt.Errorf("read password: %w", err)
		}
		if string(p) != string(again) {
			return "", errors.New("the passwords differ")
		}
		return string(p), nil
	}
	return firstLine(stdin)
}

// firstLine returns r's first line without its line end; a password longer
// than any allowed is cut here and refused by the length check.
func firstLine(r io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, 1<<10)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read password: %w", err)
	}
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	if line == "" {
		return "", errors.New("no password given (stdin, --password-file or --password-env)")
	}
	return line, nil
}
