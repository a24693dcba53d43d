package providers_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/providers"
)

type decoded struct {
	URL     string            `json:"url"`
	Body    json.RawMessage   `json:"body"`
	Headers map[string]string `json:"headers"`
}

// TestDecodeStrictReadsExactlyWhatSendReads: a payload is accepted only
// if what the validator decoded is the whole of it, each key named once.
func TestDecodeStrictReadsExactlyWhatSendReads(t *testing.T) {
	t.Parallel()
	accepted := map[string]string{
		"plain":                    `{"url": "https://x.example", "body": {"a": 1}}`,
		"same key in two objects":  `{"url": "https://x.example", "body": {"url": 1, "x": {"url": 2}}}`,
		"keys in arrays' objects":  `{"url": "https://x.example", "body": [{"a": 1}, {"a": 2}, {"A": 3}]}`,
		"arrays of arrays":         `{"url": "https://x.example", "body": [[1, [2, {"k": [3]}]], []]}`,
		"a key named like a value": `{"url": "url", "body": {"body": "body"}}`,
		"whitespace after":         "{\"url\": \"https://x.example\"}\n\t ",
	}
	for name, raw := range accepted {
		var v decoded
		require.NoError(t, providers.DecodeStrict(json.RawMessage(raw), &v), name)
		require.NotEmpty(t, v.URL, name)
	}
	refused := map[string]string{
		"keys differing in case":           `{"url": "https://x.example", "URL": "http://127.0.0.1/"}`,
		"the same key twice":               `{"url": "https://x.example", "url": "http://127.0.0.1/"}`,
		"an escaped key equal to another":  `{"url": "https://x.example", "\u0055RL": "http://127.0.0.1/"}`,
		"case-folded keys deep in a body":  `{"url": "https://x.example", "body": {"a": [{"k": 1, "K": 2}]}}`,
		"case-folded keys in a free map":   `{"url": "https://x.example", "headers": {"X-A": "1", "x-a": "2"}}`,
		"unicode case folding":             `{"url": "https://x.example", "body": {"ſ": 1, "S": 2}}`,
		"an unknown field":                 `{"url": "https://x.example", "bodyy": {}}`,
		"trailing data":                    `{"url": "https://x.example"} {}`,
		"truncated":                        `{"url": "https://x.example", "body": {`,
		"not JSON":                         `{"url": https://x.example}`,
		"a second value after whitespace":  "{\"url\": \"https://x.example\"}\n{\"url\": \"https://y.example\"}",
		"keys differing in case, reversed": `{"URL": "http://127.0.0.1/", "url": "https://x.example"}`,
	}
	for name, raw := range refused {
		var v decoded
		require.Error(t, providers.DecodeStrict(json.RawMessage(raw), &v), name)
	}
}

func BenchmarkDecodeStrict(b *testing.B) {
	raw := json.RawMessage(`{"url": "https://hooks.example.com/orders", "body": {"order_id": "ord_123", "amount": 4200, "currency": "eur", "lines": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}], "customer": {"email": "c@example.com", "name": "C"}}, "headers": {"X-Tenant": "t1"}}`)
	b.ReportAllocs()
	for b.Loop() {
		var v decoded
		if err := providers.DecodeStrict(raw, &v); err != nil {
			b.Fatal(err)
		}
	}
}
