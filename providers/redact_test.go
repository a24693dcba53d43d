package providers_test

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/providers"
)

// TestRedactionSeesTheWholeAnswerBeforeItIsCut: a secret echoed by a
// receiver across the 512-byte cut, or encoded as receivers echo things,
// leaves no part of itself in the error text.
func TestRedactionSeesTheWholeAnswerBeforeItIsCut(t *testing.T) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("a secret of forty-five bytes, signing hooks!"))
	leaks := func(t *testing.T, msg string) {
		t.Helper()
		for i := 0; i+12 <= len(secret); i++ {
			require.NotContains(t, msg, secret[i:i+12], "part of the secret left in %q", msg)
		}
	}
	leaksKey := func(t *testing.T, msg string) {
		t.Helper()
		h := hex.EncodeToString(hmacKey(secret))
		for i := 0; i+16 <= len(h); i++ {
			require.NotContains(t, strings.ToLower(msg), h[i:i+16], "part of the decoded key left in %q", msg)
		}
	}
	for name, body := range map[string]string{
		"across the cut":        strings.Repeat("x", 490) + " " + secret + " tail",
		"base64":                "echo: " + base64.StdEncoding.EncodeToString([]byte(secret)),
		"base64, URL alphabet":  "echo: " + base64.RawURLEncoding.EncodeToString([]byte(secret)),
		"percent-encoded":       "echo: " + url.QueryEscape(secret),
		"JSON, escaped slashes": `{"secret": "` + strings.ReplaceAll(secret, "/", `\/`) + `"}`,
		"JSON, \\u escapes":     `{"secret": "` + jsonEscapeAll(secret) + `"}`,
		"JSON, some escaped":    `{"secret": "` + strings.NewReplacer("_", `\u005f`, "+", `\u002B`).Replace(secret) + `"}`,
		"lower-cased":           "echo: " + strings.ToLower(secret),
		"upper-cased":           "echo: " + strings.ToUpper(secret),
		"hex":                   "echo: " + hex.EncodeToString([]byte(secret)),
		"hex, upper-case":       "echo: " + strings.ToUpper(hex.EncodeToString([]byte(secret))),
		"Bearer, base64":        "echo: " + base64.StdEncoding.EncodeToString([]byte("Bearer "+secret)),
		"Basic, base64":         "echo: " + base64.StdEncoding.EncodeToString([]byte("user:"+secret)),
		"shifted by two":        "echo: " + base64.URLEncoding.EncodeToString([]byte("ab"+secret+"z")),
		"decoded key, hex":      "echo: " + hex.EncodeToString(hmacKey(secret)),
		"decoded key, base64":   "echo: " + base64.RawStdEncoding.EncodeToString(append([]byte("k="), hmacKey(secret)...)),
	} {
		t.Run(name, func(t *testing.T) {
			err := providers.InDoubt(providers.StatusError("", 500, "", []byte(body)))
			red := providers.Redact(err, []string{secret})
			require.Contains(t, red.Error(), providers.Redacted)
			leaks(t, red.Error())
			leaks(t, strings.ToLower(red.Error()))
			leaksKey(t, red.Error())
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
				for shift := range 3 {
					full := enc.EncodeToString(append(make([]byte, shift), secret...))
					require.NotContains(t, red.Error(), full[4:24], "base64 of the secret at alignment %d", shift)
				}
			}
			class, _ := providers.Classify(red)
			require.Equal(t, providers.ClassInDoubt, class, "the class is kept")
			require.LessOrEqual(t, len(red.Error()), 600, "the answer is still cut")
		})
	}
	plain := providers.StatusError("", 404, "not found", []byte("no such hook"))
	require.Equal(t, "HTTP 404 (not found): no such hook", plain.Error())
	require.Same(t, plain, providers.Redact(plain, []string{secret}), "nothing to redact: the same error")
	require.Equal(t, "HTTP 404", providers.Redact(errors.New("HTTP 404"), []string{secret}).Error())
}

// jsonEscapeAll writes every character of s as a JSON \uXXXX escape.
func jsonEscapeAll(s string) string {
	var b strings.Builder
	for _, r := range s {
		fmt.Fprintf(&b, `\u%04x`, r)
	}
	return b.String()
}

// hmacKey is the HMAC key a whsec_ secret stands for.
func hmacKey(secret string) []byte {
	k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic(err)
	}
	return k
}

// TestSummarySaysClassAndStatusOnly: what spans and logs say of an error
// is its class and a provider's status line, never the answer's body, nor
// a key or a signature in other texts.
func TestSummarySaysClassAndStatusOnly(t *testing.T) {
	t.Parallel()
	key := strings.Repeat("5c96150ae10100a8", 4)
	body := []byte(`{"error": "duplicate webhook-id ` + key + `", "customer": "ada@example.com"}`)
	for _, tc := range []struct {
		err  error
		want string
	}{
		{providers.InDoubt(providers.StatusError("", 503, "", body)), "in_doubt: HTTP 503"},
		{providers.Throttled(providers.StatusError("sendgrid ", 429, "empty body", nil), 0), "retryable: sendgrid HTTP 429 (empty body)"},
		{providers.Permanent(errors.New("stripe idempotency_error: key " + key + " reused")), "permanent: stripe idempotency_error: key […] reused"},
		{errors.New("v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4= rejected"), "v1,[…] rejected"},
		{nil, ""},
	} {
		got := providers.Summary(tc.err)
		require.Equal(t, tc.want, got)
		require.NotContains(t, got, key)
		require.NotContains(t, got, "ada@example.com")
	}
	long := providers.Summary(errors.New(strings.Repeat("word ", 100)))
	require.LessOrEqual(t, len(long), 164)
}
