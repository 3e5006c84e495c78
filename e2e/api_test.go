package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/service/api"
)

// apiClient talks to the DPCS HTTP API as a client application does.
type apiClient struct {
	base string
	hc   *http.Client
}

// newAPIClient bounds each request by DefaultStall. Requests are not
// retried (a POST may have been applied), so the bound is generous: on a
// loaded 2-core machine under -race, five members created at once (each a
// bcrypt hash) took more than the 30 s it used to be.
func newAPIClient(addr string) *apiClient {
	return &apiClient{base: "http://" + addr, hc: &http.Client{Timeout: DefaultStall}}
}

// call sends in as JSON (nil: no body) with the bearer token (empty: none),
// expects status want and decodes the answer into out (nil: ignored).
func (c *apiClient) call(ctx context.Context, method, path, token string, in, out any, want int) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode %s: %w", method, path, b, err)
		}
	}
	return nil
}

// login exchanges a member id and password for an access token.
func (c *apiClient) login(ctx context.Context, id int64, password string) (string, error) {
	var tok api.Tokens
	err := c.call(ctx, http.MethodPost, "/auth/token", "", map[string]string{"login": fmt.Sprint(id), "password": password},
		&tok, http.StatusOK)
	if err == nil && tok.AccessToken == "" {
		err = errors.New("login: no access token")
	}
	return tok.AccessToken, err
}

// inbox returns the family's notifications with ids above after (0: all).
func (c *apiClient) inbox(ctx context.Context, token string, fid, after int64) ([]notify.Notification, error) {
	var all []notify.Notification
	for before := int64(0); ; {
		// after > 0 pages oldest first; from the start, pages go newest first.
		q := fmt.Sprintf("after=%d", after)
		if after == 0 && before > 0 {
			q = fmt.Sprintf("before=%d", before)
		}
		var page struct {
			Items      []notify.Notification
			NextBefore int64
		}
		if err := c.call(ctx, http.MethodGet, fmt.Sprintf("/families/%d/notifications?%s&limit=1000", fid, q),
			token, nil, &page, http.StatusOK); err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		switch {
		case len(page.Items) < 1000:
			return all, nil
		case after > 0:
			after = page.Items[len(page.Items)-1].ID
		case page.NextBefore == 0:
			return all, nil
		default:
			before = page.NextBefore
		}
	}
}

// metric reads one counter from GET /metrics (of a client on the admin
// address: the API address does not serve the metrics).
func (c *apiClient) metric(ctx context.Context, name string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		// client_golang writes 1e6 and up as 1e+06: read a float.
		var n float64
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			_, err := fmt.Sscan(v, &n)
			return int64(n), err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("GET /metrics: no %s", name)
}

// sseStream is a live subscription to a family's notifications (GET
// /families/{id}/notifications/stream), counting what arrives. Close ends it.
type sseStream struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	count map[string]int // notification event id → messages received
	err   error
}

// openSSE subscribes and returns once the server sent its first ping: from
// then on, every notification stored for the family is pushed.
func openSSE(ctx context.Context, c *apiClient, token string, fid int64) (*sseStream, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, fmt.Sprintf("%s/families/%d/notifications/stream", c.base, fid), nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req) // no client timeout: the stream lasts
	if err != nil {
		cancel()
		return nil, fmt.Errorf("SSE: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("SSE: status %d: %s", resp.StatusCode, b)
	}
	s := &sseStream{cancel: cancel, done: make(chan struct{}), count: map[string]int{}}
	ready := make(chan struct{})
	go s.read(resp.Body, ready)
	select {
	case <-ready:
		return s, nil
	case <-time.After(DefaultStall):
		s.Close()
		return nil, fmt.Errorf("SSE: no ping within %v", DefaultStall)
	}
}

func (s *sseStream) read(body io.ReadCloser, ready chan struct{}) {
	defer close(s.done)
	defer body.Close()
	var event, data string
	pinged := false
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		case line == "":
			if event == notify.EventName {
				var n notify.Notification
				s.mu.Lock()
				if err := json.Unmarshal([]byte(data), &n); err != nil && s.err == nil {
					s.err = fmt.Errorf("SSE: bad notification %q: %w", data, err)
				}
				// A family change is live-only (never stored): the
				// checks count what the inbox holds.
				if n.Kind != notify.KindFamilyChanged {
					s.count[n.EventID]++
				}
				s.mu.Unlock()
			} else if event == "ping" && !pinged {
				pinged = true
				close(ready)
			}
			event, data = "", ""
		}
	}
}

// received returns what arrived so far: messages per notification event id.
func (s *sseStream) received() (map[string]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.count))
	for k, v := range s.count {
		out[k] = v
	}
	return out, s.err
}

// Close ends the subscription and waits for the reader.
func (s *sseStream) Close() {
	s.cancel()
	<-s.done
}
