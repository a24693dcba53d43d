package fakes

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// StripeRequest is one request a FakeStripe saw.
type StripeRequest struct {
	Method, Path   string
	IdempotencyKey string
	Form           url.Values
	At             time.Time
	// Status is the answer's status code (429 when over Limit).
	Status int
}

// FakeStripe is an httptest Stripe API that records every request. By
// default it answers 200 with an object whose id is derived from the path;
// Respond scripts other answers per path. Unlike stripe-mock it lets tests
// choose status codes and headers (Stripe-Should-Retry, Idempotent-Replayed).
type FakeStripe struct {
	*Server
	// Delay, set before use, is waited before every answer.
	Delay    time.Duration
	mu       sync.Mutex
	requests []StripeRequest
	script   map[string][]Response
	limit    limit
}

// NewFakeStripe starts a fake Stripe API.
func NewFakeStripe() *FakeStripe {
	f := &FakeStripe{script: map[string][]Response{}}
	f.Server = newServer(http.HandlerFunc(f.serve))
	return f
}

// Respond queues responses for the next requests to path.
func (f *FakeStripe) Respond(path string, responses ...Response) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script[path] = append(f.script[path], responses...)
}

// Limit makes the fake answer as Stripe does over its rate limit: a
// request beyond perSecond gets 429 rate_limit with no Retry-After, before
// any scripted answer. 0 lifts it. Stripe publishes its limits as
// requests a second, so the bucket holds a second of them: with a fifth
// of a second (the receiver's), requests sent at the rate were refused
// whenever this process was descheduled for longer than that and read
// them late all at once, on a box running three chaos drills.
func (f *FakeStripe) Limit(perSecond float64) { f.limit.setBurst(perSecond, perSecond) }

// StripeError is a scripted Stripe error response.
func StripeError(status int, typ, code string, headers ...string) Response {
	return func(w http.ResponseWriter, _ *http.Request) int {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error": {"type": %q, "code": %q, "message": "scripted %s"}}`, typ, code, typ)
		return status
	}
}

// StripeObject is a scripted success with the given id and headers.
func StripeObject(id string, headers ...string) Response {
	return func(w http.ResponseWriter, _ *http.Request) int {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id": %q, "object": "refund"}`, id)
		return http.StatusOK
	}
}

func (f *FakeStripe) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client went away mid-request: nothing to act on
	}
	time.Sleep(f.Delay)
	form, _ := url.ParseQuery(string(body))
	req := StripeRequest{
		Method: r.Method, Path: r.URL.Path, IdempotencyKey: r.Header.Get("Idempotency-Key"), Form: form, At: time.Now(),
	}
	over := !f.limit.allow()
	f.mu.Lock()
	var respond Response
	if q := f.script[r.URL.Path]; len(q) > 0 && !over {
		respond, f.script[r.URL.Path] = q[0], q[1:]
	}
	n := len(f.requests) + 1
	f.mu.Unlock()
	switch {
	case over:
		respond = StripeError(http.StatusTooManyRequests, "invalid_request_error", "rate_limit")
	case respond == nil:
		respond = StripeObject(objectID(r.URL.Path, n))
	}
	req.Status = respond(w, r)
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.mu.Unlock()
}

// objectID is the id a request acts on, as Stripe answers it: the id in the
// path for an action on an existing object (/v1/payment_intents/pi_1/capture),
// otherwise a new Stripe-shaped id numbered n.
func objectID(path string, n int) string {
	prefix := idPrefix(path)
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) >= 3 && strings.HasPrefix(parts[2], prefix) {
		return parts[2]
	}
	return fmt.Sprintf("%s%d", prefix, n)
}

// idPrefix gives the fake's objects ids shaped like Stripe's.
func idPrefix(path string) string {
	for _, p := range []struct{ path, prefix string }{
		{"/v1/payment_intents", "pi_"}, {"/v1/refunds", "re_"}, {"/v1/customers", "cus_"}, {"/v1/transfers", "tr_"},
	} {
		if strings.HasPrefix(path, p.path) {
			return p.prefix
		}
	}
	return "obj_"
}

// Requests returns a copy of every request seen so far.
func (f *FakeStripe) Requests() []StripeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]StripeRequest(nil), f.requests...)
}

// StripeMockVersion is the stripe-mock release .ci/run installs.
const StripeMockVersion = "v0.203.0"

// FindStripeMock returns the path of the stripe-mock binary: on PATH or in
// GOPATH/bin, where go install puts it.
func FindStripeMock() (string, error) {
	if bin, err := exec.LookPath("stripe-mock"); err == nil {
		return bin, nil
	}
	gopath := filepath.Join(os.Getenv("HOME"), "go")
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		gopath = strings.TrimSpace(string(out))
	}
	bin := filepath.Join(gopath, "bin", "stripe-mock")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("stripe-mock not installed: go install github.com/stripe/stripe-mock@%s", StripeMockVersion)
	}
	return bin, nil
}

// RunStripeMock starts stripe-mock on a free loopback port and returns its
// base URL and a func that stops it.
func RunStripeMock(bin string) (string, func(), error) {
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-http-addr", "127.0.0.1:")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return "", nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		cancel()
		return "", nil, fmt.Errorf("start stripe-mock: %w", err)
	}
	stop := func() { cancel(); _ = cmd.Wait() }
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "Listening for HTTP at address: "); ok {
				select {
				case addr <- a:
				default:
				}
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a, stop, nil
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, fmt.Errorf("stripe-mock did not start listening within 30s")
	}
}
