package fakes

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// SendGridRequest is one mail send a FakeSendGrid saw.
type SendGridRequest struct {
	Authorization string
	Body          map[string]any
	// Key is the outboxd_idempotency_key custom arg.
	Key string
	At  time.Time
}

// FakeSendGrid is an httptest SendGrid v3 API that records every mail send
// and answers 202 with an X-Message-Id unless scripted with Respond.
type FakeSendGrid struct {
	*Server
	// Delay, set before use, is waited before every answer.
	Delay    time.Duration
	mu       sync.Mutex
	requests []SendGridRequest
	script   []Response
}

// NewFakeSendGrid starts a fake SendGrid API.
func NewFakeSendGrid() *FakeSendGrid {
	f := &FakeSendGrid{}
	f.Server = newServer(http.HandlerFunc(f.serve))
	return f
}

// Respond queues responses for the next mail sends.
func (f *FakeSendGrid) Respond(responses ...Response) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = append(f.script, responses...)
}

func (f *FakeSendGrid) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v3/mail/send" {
		http.Error(w, `{"errors": [{"message": "not found"}]}`, http.StatusNotFound)
		return
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client went away mid-request: nothing to act on
	}
	time.Sleep(f.Delay)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	key := ""
	if args, ok := body["custom_args"].(map[string]any); ok {
		key, _ = args["outboxd_idempotency_key"].(string)
	}
	f.mu.Lock()
	f.requests = append(f.requests, SendGridRequest{Authorization: r.Header.Get("Authorization"), Body: body, Key: key, At: time.Now()})
	n := len(f.requests)
	var respond Response
	if len(f.script) > 0 {
		respond, f.script = f.script[0], f.script[1:]
	}
	f.mu.Unlock()
	if respond != nil {
		respond(w, r)
		return
	}
	w.Header().Set("X-Message-Id", fmt.Sprintf("msg_%d", n))
	w.WriteHeader(http.StatusAccepted)
}

// Requests returns a copy of every mail send seen so far.
func (f *FakeSendGrid) Requests() []SendGridRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]SendGridRequest(nil), f.requests...)
}
