package sendgrid_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/sendgrid"
)

const key = "886d1f49b1d24c00276ec4dc924a142b00dba0ea69f7e845a30711e9714929fb"

const welcome = `{"from": {"email": "shop@example.com", "name": "Shop"}, "to": [{"email": "ada@example.com", "name": "Ada"}],
	"bcc": [{"email": "audit@example.com"}], "subject": "Welcome", "text": "Hello Ada", "html": "<p>Hello Ada</p>", "categories": ["welcome"]}`

func newProvider(t *testing.T, host string) *sendgrid.Provider {
	t.Helper()
	p, err := sendgrid.New(sendgrid.Config{APIKey: "SG.test", APIHost: host, Timeout: 5 * time.Second})
	require.NoError(t, err)
	return p
}

func req(payload string) providers.Request {
	return providers.Request{EffectID: "e", Kind: "email.welcome", Key: key, Payload: json.RawMessage(payload), Attempt: 1}
}

func TestSendCarriesKeyAndReturnsMessageID(t *testing.T) {
	t.Parallel()
	f := fakes.NewFakeSendGrid()
	defer f.Close()
	p := newProvider(t, f.URL)
	res, err := p.Send(context.Background(), req(welcome))
	require.NoError(t, err)
	require.Equal(t, "msg_1", res.Ref, "X-Message-Id becomes provider_ref")
	reqs := f.Requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "Bearer SG.test", reqs[0].Authorization)
	require.Equal(t, key, reqs[0].Key, "the key travels as a custom_args entry")
	require.Equal(t, "Welcome", reqs[0].Body["subject"])
	content := reqs[0].Body["content"].([]any)
	require.Equal(t, "text/plain", content[0].(map[string]any)["type"], "text/plain comes first")
}

func TestSendTemplate(t *testing.T) {
	t.Parallel()
	f := fakes.NewFakeSendGrid()
	defer f.Close()
	p := newProvider(t, f.URL)
	_, err := p.Send(context.Background(), req(`{"from": {"email": "shop@example.com"}, "to": [{"email": "ada@example.com"}],
		"template_id": "d-123", "dynamic_template_data": {"name": "Ada", "items": 3}}`))
	require.NoError(t, err)
	body := f.Requests()[0].Body
	require.Equal(t, "d-123", body["template_id"])
	per := body["personalizations"].([]any)[0].(map[string]any)
	require.Equal(t, map[string]any{"name": "Ada", "items": float64(3)}, per["dynamic_template_data"])
}

func TestStatusClasses(t *testing.T) {
	t.Parallel()
	reset := time.Now().Add(30 * time.Second).Unix()
	cases := []struct {
		name  string
		resp  fakes.Response
		class providers.Class
		after bool
	}{
		{"429 waits for the reset", fakes.Status(429, "X-RateLimit-Reset", strconv.FormatInt(reset, 10)), providers.ClassRetryable, true},
		{"500: the mail may have been accepted", fakes.Status(500), providers.ClassInDoubt, false},
		{"503", fakes.Status(503), providers.ClassInDoubt, false},
		{"400", fakes.Status(400), providers.ClassPermanent, false},
		{"401", fakes.Status(401), providers.ClassPermanent, false},
		{"413", fakes.Status(413), providers.ClassPermanent, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := fakes.NewFakeSendGrid()
			defer f.Close()
			f.Respond(tc.resp)
			_, err := newProvider(t, f.URL).Send(context.Background(), req(welcome))
			require.Error(t, err, "Send's nil error on HTTP failures must not pass as success")
			class, after := providers.Classify(err)
			require.Equal(t, tc.class, class, "error: %v", err)
			if tc.after {
				require.Greater(t, after, 20*time.Second)
				require.LessOrEqual(t, after, 30*time.Second)
			} else {
				require.Zero(t, after)
			}
		})
	}
}

func TestTimeoutIsInDoubt(t *testing.T) {
	t.Parallel()
	f := fakes.NewFakeSendGrid()
	defer f.Close()
	f.Respond(func(w http.ResponseWriter, r *http.Request) int { <-r.Context().Done(); return 0 })
	p, err := sendgrid.New(sendgrid.Config{APIKey: "SG.test", APIHost: f.URL, Timeout: 300 * time.Millisecond})
	require.NoError(t, err)
	_, err = p.Send(context.Background(), req(welcome))
	class, _ := providers.Classify(err)
	require.Equal(t, providers.ClassInDoubt, class, "error: %v", err)
	require.Equal(t, providers.AtMostOnce, p.Guarantees().InDoubt, "default: never re-send an email in doubt")
	require.Zero(t, p.Guarantees().KeyWindow, "no keys, so no key window")
}

func TestValidatePayloadRejectsBadInput(t *testing.T) {
	t.Parallel()
	bad := map[string]string{
		"no from":             `{"to": [{"email": "a@example.com"}], "subject": "s", "text": "t"}`,
		"bad from":            `{"from": {"email": "nope"}, "to": [{"email": "a@example.com"}], "subject": "s", "text": "t"}`,
		"no to":               `{"from": {"email": "s@example.com"}, "subject": "s", "text": "t"}`,
		"bad to":              `{"from": {"email": "s@example.com"}, "to": [{"email": "a@"}], "subject": "s", "text": "t"}`,
		"duplicate recipient": `{"from": {"email": "s@example.com"}, "to": [{"email": "a@example.com"}], "cc": [{"email": "A@example.com"}], "subject": "s", "text": "t"}`,
		"no subject":          `{"from": {"email": "s@example.com"}, "to": [{"email": "a@example.com"}], "text": "t"}`,
		"no content":          `{"from": {"email": "s@example.com"}, "to": [{"email": "a@example.com"}], "subject": "s"}`,
		"data sans template":  `{"from": {"email": "s@example.com"}, "to": [{"email": "a@example.com"}], "subject": "s", "text": "t", "dynamic_template_data": {"a": 1}}`,
		"unknown field":       `{"from": {"email": "s@example.com"}, "to": [{"email": "a@example.com"}], "subject": "s", "text": "t", "attachments": []}`,
		"header injection":    `{"from": {"email": "s@example.com", "name": "x\r\nBcc: evil@example.com"}, "to": [{"email": "a@example.com"}], "subject": "s", "text": "t"}`,
		"too many categories": `{"from": {"email": "s@example.com"}, "to": [{"email": "a@example.com"}], "subject": "s", "text": "t", "categories": ["1","2","3","4","5","6","7","8","9","10","11"]}`,
	}
	for name, payload := range bad {
		err := sendgrid.Schema{}.ValidatePayload("k", json.RawMessage(payload))
		require.Error(t, err, name)
		require.True(t, strings.Contains(err.Error(), "payload"), name)
	}
	require.NoError(t, sendgrid.Schema{}.ValidatePayload("k", json.RawMessage(welcome)))
}

func TestOversizedResponseIsCutOffAndInDoubt(t *testing.T) {
	t.Parallel()
	f := fakes.NewFakeSendGrid()
	defer f.Close()
	f.Respond(func(w http.ResponseWriter, _ *http.Request) int {
		w.Header().Set("X-Message-Id", "msg_big")
		w.WriteHeader(202)
		_, _ = w.Write([]byte(strings.Repeat("x", 4*providers.MaxResponseBytes)))
		return 202
	})
	_, err := newProvider(t, f.URL).Send(context.Background(), req(welcome))
	require.ErrorIs(t, err, providers.ErrResponseTooLarge)
	class, _ := providers.Classify(err)
	require.Equal(t, providers.ClassInDoubt, class, "the mail may have been accepted")
}
