package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// The floor targets: Go's net/http answering POST /decisions with the
// request and answer DPCS's have — the JSON events decoded, one decision
// per event encoded, the bearer token checked — and nothing judged, stored
// or produced. What is left of a decision's CPU on top of it is DPCS's own.

// floorEvent and floorDecision are DPCS's request and answer fields.
type floorEvent struct {
	EventID    string         `json:"eventId"`
	Timestamp  time.Time      `json:"timestamp"`
	FamilyID   int64          `json:"familyId"`
	CustomerID int64          `json:"customerId"`
	AppID      string         `json:"appId"`
	BytesUsed  int64          `json:"bytesUsed"`
	Metadata   map[string]any `json:"metadata,omitempty"`
}

type floorDecision struct {
	EventID          string `json:"eventId"`
	Decision         string `json:"decision"`
	Rule             string `json:"rule,omitempty"`
	Duplicate        bool   `json:"duplicate"`
	RemainingBytes   int64  `json:"remainingBytes"`
	TotalBytes       int64  `json:"totalBytes"`
	DailyUsedBytes   int64  `json:"dailyUsedBytes"`
	MonthlyUsedBytes int64  `json:"monthlyUsedBytes"`
}

// serveFloor serves the floor until ctx ends, printing "ready <addr>";
// -h2c serves HTTP/2 without TLS (prior knowledge) instead of HTTP/1.1.
func serveFloor(ctx context.Context, stdout io.Writer, args []string) error {
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	h2c := fs.Bool("h2c", false, "serve HTTP/2 cleartext instead of HTTP/1.1")
	token := fs.String("token", "", "the bearer token callers must send")
	if err := fs.Parse(args); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /decisions", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+*token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		var ask struct {
			Events []floorEvent `json:"events"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&ask); err != nil || len(ask.Events) == 0 {
			http.Error(w, "bad request", http.StatusUnprocessableEntity)
			return
		}
		var out struct {
			Decisions []floorDecision `json:"decisions"`
		}
		out.Decisions = make([]floorDecision, len(ask.Events))
		for i, e := range ask.Events {
			out.Decisions[i] = floorDecision{EventID: e.EventID, Decision: "ALLOWED", RemainingBytes: 1 << 33,
				TotalBytes: 1 << 34, DailyUsedBytes: e.BytesUsed, MonthlyUsedBytes: e.BytesUsed}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&out)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, Protocols: new(http.Protocols)}
	if *h2c {
		srv.Protocols.SetUnencryptedHTTP2(true)
	} else {
		srv.Protocols.SetHTTP1(true)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "ready", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }() // ends with Shutdown below
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// startFloor starts the floor in a process of its own and returns it with
// a caller posting DPCS's requests to it (dpcs.call).
func startFloor(cfg config, self string, gen *generator, h2c bool) (*child, caller, error) {
	token := "gw_peers_" + randomHex(20)
	args := []string{"floor", "-token", token}
	name := "floor-http1"
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.inFlight + cfg.callers, IdleConnTimeout: time.Minute}
	if h2c {
		args, name = append(args, "-h2c"), "floor-h2c"
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	c, addr, err := start(cfg.dir, name, self, args, baseEnv(), true)
	if err != nil {
		return nil, nil, err
	}
	d := &dpcs{gen: gen, token: token, run: randomHex(4), url: "http://" + addr, client: &http.Client{Transport: tr}}
	return c, d.call, nil
}
