package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/cmd/internal/providerevents"
	"github.com/outboxd/outboxd/cmd/internal/webui"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outbox/idempotency"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/sideeffects"
)

// The local servers the demo runs beside the dispatcher: the application's
// POST /orders, the web view, and SendGrid's Event Webhook.

// demoWebView serves the web view of schema on a loopback port; with
// actions, an admin token is made up and returned.
func demoWebView(pool *pgxpool.Pool, schema string, actions bool, g map[string]providers.Guarantees) (url, token string, stop func(), err error) {
	op, err := sideeffects.NewOperator(pool, sideeffects.OperatorConfig{Schema: schema, Guarantees: g})
	if err != nil {
		return "", "", nil, err
	}
	if actions {
		var b [16]byte
		_, _ = rand.Read(b[:])
		token = hex.EncodeToString(b[:])
	}
	keys, err := idempotency.NewKeys(pool, schema)
	if err != nil {
		return "", "", nil, err
	}
	h, err := webui.New(webui.Config{Schema: schema, Operator: op, AdminToken: token, Keys: keys,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return "", "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	return "http://" + ln.Addr().String() + "/ui/", token, func() { _ = srv.Close() }, nil
}

// demoSendGridEvent posts SendGrid's signed processed event for effect f
// twice (SendGrid delivers at least once) to outboxd's provider events
// endpoint and reports what it did.
func demoSendGridEvent(ctx context.Context, pool *pgxpool.Pool, schema string, f *outboxtype.Effect) (string, error) {
	signer, err := fakes.NewSendGridEventSigner()
	if err != nil {
		return "", err
	}
	h, err := providerevents.New(pool, providerevents.Config{Schema: schema, SendGridPublicKey: signer.PublicKey(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	defer srv.Close()
	body, err := json.Marshal([]map[string]any{fakes.SendGridEvent("sg_demo_processed", "processed", f.IdempotencyKey, "msg_demo_accepted", time.Now())})
	if err != nil {
		return "", err
	}
	var answers []string
	for range 2 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ln.Addr().String()+providerevents.SendGridPath, bytes.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header = signer.Headers(body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers = append(answers, fmt.Sprintf("HTTP %d %s", resp.StatusCode, strings.TrimSpace(string(b))))
	}
	return fmt.Sprintf("SendGrid's signed processed event, delivered twice: %s; %s -> the email is confirmed once, not re-sent",
		answers[0], answers[1]), nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// orderCreated is POST /orders' answer.
type orderCreated struct {
	EventID uuid.UUID             `json:"event_id"`
	Effects []outbox.EffectResult `json:"effects"`
}

// demoAPI serves POST /orders on a loopback port, behind the
// Idempotency-Key middleware, and returns its base URL.
func demoAPI(pool *pgxpool.Pool, schema string, ob *outbox.Outbox, receiver string) (string, func(), error) {
	mw, err := idempotency.New(pool, idempotency.Config{Schema: schema,
		// Each API client's keys are its own. (A real API takes the
		// identity from its authentication, not from a header anyone sets.)
		Scope: func(r *http.Request) string { return r.Header.Get("X-Api-Client") }})
	if err != nil {
		return "", nil, err
	}
	create := func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			ID      string `json:"id"`
			Amount  int    `json:"amount"`
			Path    string `json:"path"`
			Capture bool   `json:"capture"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.ID == "" {
			http.Error(w, `{"error": "id and amount required"}`, http.StatusUnprocessableEntity)
			return
		}
		ctx := r.Context()
		tx, _ := idempotency.Tx(ctx)
		if _, err := tx.Exec(ctx, "INSERT INTO "+schema+".orders (id, amount, paid_at) VALUES ($1, $2, now())", in.ID, in.Amount); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		res, err := ob.Enqueue(ctx, tx, orderEvent(in.ID, in.Amount), orderEffects(receiver, in.ID, in.Path, in.Capture)...)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(orderCreated{EventID: res.EventID, Effects: res.Effects})
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw.Transactional(http.HandlerFunc(create)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

type apiAnswer struct {
	status   int
	replayed string
	body     []byte
}

func postOrder(ctx context.Context, api, key, body string) (apiAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/orders", strings.NewReader(body))
	if err != nil {
		return apiAnswer{}, err
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Api-Client", "shop-frontend")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return apiAnswer{}, fmt.Errorf("POST /orders: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return apiAnswer{status: resp.StatusCode, replayed: cmp.Or(resp.Header.Get(idempotency.ReplayedHeader), "absent"), body: b}, err
}
