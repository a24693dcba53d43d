// Package fakes holds recording fake provider servers for tests and the demo.
package fakes

import (
	"io"
	"net/http"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Delivery is one request a Receiver saw.
type Delivery struct {
	Path     string
	ID       string // webhook-id
	Key      string // Idempotency-Key
	Body     []byte
	Verified bool
	Status   int
	At       time.Time
}

// Receiver is a webhook endpoint that verifies Standard Webhooks signatures
// with the library's verifier and records every request. Responses are 204
// unless scripted with Respond.
type Receiver struct {
	*Server
	// Delay, set before use, is waited before every answer.
	Delay    time.Duration
	verifier *standardwebhooks.Webhook

	mu         sync.Mutex
	deliveries []Delivery
	script     map[string][]Response
	throttle   string // Retry-After of every answer while throttling
	limit      limit
	limitAfter string // Retry-After of an answer over limit
}

// Throttle makes the receiver answer every request 429 with Retry-After:
// retryAfter (seconds) until Unthrottle, as a partner over its rate does.
func (r *Receiver) Throttle(retryAfter string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.throttle = retryAfter
}

// Unthrottle ends Throttle.
func (r *Receiver) Unthrottle() { r.Throttle("") }

// Limit makes the receiver refuse, as a partner with a rate limit does,
// every request beyond perSecond (with a burst of a fifth of a second):
// 429 with Retry-After: retryAfter (seconds; none when empty). 0 lifts it.
func (r *Receiver) Limit(perSecond float64, retryAfter string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.limit.set(perSecond)
	r.limitAfter = retryAfter
}

// NewReceiver starts a receiver that verifies with secret (whsec_...).
func NewReceiver(secret string) (*Receiver, error) {
	v, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, err
	}
	r := &Receiver{verifier: v, script: map[string][]Response{}}
	r.Server = newServer(http.HandlerFunc(r.serve))
	return r, nil
}

// Verify makes the receiver verify with secret from now on: for a
// destination whose secret is made after its URL (a registered endpoint).
func (r *Receiver) Verify(secret string) error {
	v, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.verifier = v
	return nil
}

// Response writes a scripted response and returns its status.
type Response func(w http.ResponseWriter, r *http.Request) int

// Respond queues responses for the next requests to path; once used up,
// requests get 204.
func (r *Receiver) Respond(path string, responses ...Response) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.script[path] = append(r.script[path], responses...)
}

// Status is a scripted response with the given status and headers
// (name, value pairs).
func Status(code int, headers ...string) Response {
	return func(w http.ResponseWriter, _ *http.Request) int {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(code)
		return code
	}
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return // the client went away mid-request: nothing to act on
	}
	time.Sleep(r.Delay)
	r.mu.Lock()
	verifier := r.verifier
	r.mu.Unlock()
	d := Delivery{
		Path: req.URL.Path, ID: req.Header.Get("webhook-id"), Key: req.Header.Get("Idempotency-Key"),
		Body: body, Verified: verifier.Verify(body, req.Header) == nil, At: time.Now(),
	}
	over := !r.limit.allow()
	r.mu.Lock()
	var respond Response
	if r.throttle != "" {
		respond = Status(http.StatusTooManyRequests, "Retry-After", r.throttle)
	} else if over {
		if r.limitAfter != "" {
			respond = Status(http.StatusTooManyRequests, "Retry-After", r.limitAfter)
		} else {
			respond = Status(http.StatusTooManyRequests)
		}
	} else if q := r.script[req.URL.Path]; len(q) > 0 {
		respond, r.script[req.URL.Path] = q[0], q[1:]
	}
	r.mu.Unlock()
	switch {
	case !d.Verified:
		d.Status = http.StatusUnauthorized
		w.WriteHeader(d.Status)
	case respond != nil:
		d.Status = respond(w, req)
	default:
		d.Status = http.StatusNoContent
		w.WriteHeader(d.Status)
	}
	r.mu.Lock()
	r.deliveries = append(r.deliveries, d)
	r.mu.Unlock()
}

// Deliveries returns a copy of every request seen so far.
func (r *Receiver) Deliveries() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.deliveries...)
}

// ByID groups the deliveries by webhook-id.
func (r *Receiver) ByID() map[string][]Delivery {
	out := map[string][]Delivery{}
	for _, d := range r.Deliveries() {
		out[d.ID] = append(out[d.ID], d)
	}
	return out
}
