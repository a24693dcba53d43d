package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
)

// request is a protected request, read and fingerprinted.
type request struct {
	scope, method, route, key string
	fingerprint               string
	// legacy is the fingerprint as outboxd computed it before path and
	// query were part of it, to compare with keys stored then.
	legacy    string
	parts     map[string]string // what the fingerprint is made of, each hashed
	retention time.Duration     // 0: forever
}

// prepare validates the key and reads the body. It returns nil, true for a
// request the middleware does not protect, and nil, false after answering
// a bad one.
func (m *Middleware) prepare(w http.ResponseWriter, r *http.Request) (*request, bool) {
	cfg := &m.cfg
	if !slices.Contains(cfg.Methods, r.Method) {
		return nil, true
	}
	if len(r.Header.Values(cfg.Header)) > 1 {
		m.refuse(w, http.StatusBadRequest, "idempotency_key_repeated",
			fmt.Sprintf("the request carries %d %s headers: send exactly one", len(r.Header.Values(cfg.Header)), cfg.Header), nil)
		return nil, false
	}
	key := r.Header.Get(cfg.Header)
	if key == "" {
		if !slices.Contains(cfg.RequiredFor, r.Method) {
			return nil, true
		}
		m.refuse(w, http.StatusBadRequest, "idempotency_key_missing",
			fmt.Sprintf("%s requests to this endpoint need an %s header: send a new unique value (a UUID) per operation, and the same value when you retry it", r.Method, cfg.Header), nil)
		return nil, false
	}
	if len(key) > cfg.MaxKeyLength || !cfg.KeyPattern.MatchString(key) {
		m.refuse(w, http.StatusBadRequest, "idempotency_key_invalid",
			fmt.Sprintf("the %s header must be %s; got %d bytes", cfg.Header, describeKeyRule(cfg), len(key)), nil)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, cfg.MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			m.refuse(w, http.StatusRequestEntityTooLarge, "request_too_large",
				fmt.Sprintf("the request body exceeds %d bytes", cfg.MaxBodyBytes), nil)
		} else {
			m.refuse(w, http.StatusBadRequest, "request_body_unreadable", "the request body could not be read: "+err.Error(), nil)
		}
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))

	req := &request{scope: cfg.Scope(r), method: r.Method, route: cfg.Route(r), key: key}
	req.retention = cfg.retention(req.route)
	// The request as the client sent it: the path (with its parameters)
	// and the query, not only the route; each header's values as a JSON
	// array, so that "a b" and the two values "a", "b" differ.
	req.parts = map[string]string{"body": hashOf(body), "path": hashOf([]byte(r.URL.EscapedPath())), "query": hashOf([]byte(r.URL.RawQuery))}
	legacy := map[string]string{"body": req.parts["body"]}
	for _, h := range cfg.FingerprintHeaders {
		values, _ := json.Marshal(r.Header.Values(h))
		req.parts["header "+h] = hashOf(values)
		legacy["header "+h] = hashOf([]byte(fmt.Sprint(r.Header.Values(h))))
	}
	req.fingerprint = fingerprintOf(req.method, req.route, req.parts)
	req.legacy = fingerprintOf(req.method, req.route, legacy)
	return req, true
}

func fingerprintOf(method, route string, parts map[string]string) string {
	sum := sha256.New()
	for _, s := range []string{method, route} {
		fmt.Fprintf(sum, "%d:%s", len(s), s)
	}
	for _, k := range slices.Sorted(maps.Keys(parts)) {
		fmt.Fprintf(sum, "%d:%s=%s", len(k), k, parts[k])
	}
	return hex.EncodeToString(sum.Sum(nil))
}

// sameAs reports whether req is the request a stored key was made for. A
// key stored before path and query were fingerprinted (its parts lack
// "path") is compared the way it was made.
func (req *request) sameAs(fingerprint string, parts map[string]string) bool {
	if _, current := parts["path"]; !current && parts != nil {
		return fingerprint == req.legacy
	}
	return fingerprint == req.fingerprint
}

func hashOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// differs names the parts of the fingerprint that differ from stored.
func (req *request) differs(stored map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(req.parts)) {
		if stored[k] != req.parts[k] {
			out = append(out, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(stored)) {
		if _, ok := req.parts[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

// errorBody is the JSON of every answer the middleware gives itself.
type errorBody struct {
	Error struct {
		Code    string   `json:"code"`
		Message string   `json:"message"`
		Differs []string `json:"differs,omitempty"`
	} `json:"error"`
}

func (m *Middleware) refuse(w http.ResponseWriter, status int, code, msg string, differs []string) {
	var b errorBody
	b.Error.Code, b.Error.Message, b.Error.Differs = code, msg, differs
	out, _ := json.Marshal(b)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(out, '\n'))
	switch code {
	case "idempotency_key_in_use":
		m.observe(InFlight)
	case "idempotency_key_reused":
		m.observe(FingerprintMismatch)
	case "idempotency_commit_failed":
		m.observe(RolledBack)
	default:
		m.observe(Invalid)
	}
}

func (m *Middleware) inFlight(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.Itoa(int((m.cfg.RetryAfter+time.Second-1)/time.Second)))
	m.refuse(w, http.StatusConflict, "idempotency_key_in_use",
		"a request with this "+m.cfg.Header+" is still being processed: retry after a moment with the same key", nil)
}

// mismatch answers 422 Unprocessable Content, as the IETF
// Idempotency-Key draft asks for a key reused with another request (409
// stays for a key in flight).
func (m *Middleware) mismatch(w http.ResponseWriter, differs []string) {
	m.refuse(w, http.StatusUnprocessableEntity, "idempotency_key_reused",
		"this "+m.cfg.Header+" was already used for a different request (see differs): use a new key for a new operation", differs)
}

// spanAttrs name the request on a span: its route and method, never its
// key (a client's secret to replay a response) or its scope.
func (req *request) spanAttrs() []outboxtype.Attr {
	return []outboxtype.Attr{{Key: "http.route", Value: req.route}, {Key: "http.request.method", Value: req.method}}
}

func (m *Middleware) observe(o Outcome) {
	if m.cfg.Observer != nil {
		m.cfg.Observer.Observe(outboxtype.KeyRequest{Outcome: string(o)})
	}
}

// recorder captures a handler's response, so that nothing reaches the
// client before it is stored.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

func (r *recorder) code() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}

// send writes the captured response to w.
func (r *recorder) send(w http.ResponseWriter) {
	maps.Copy(w.Header(), r.header)
	w.WriteHeader(r.code())
	_, _ = w.Write(r.body.Bytes())
}

// stored is what a completed key holds.
type stored struct {
	Status  int
	Headers http.Header
	Body    []byte
}

// replay writes a stored response byte for byte, marked as a replay.
func (s *stored) replay(w http.ResponseWriter) {
	maps.Copy(w.Header(), s.Headers)
	w.Header().Set(ReplayedHeader, "true")
	w.WriteHeader(s.Status)
	_, _ = w.Write(s.Body)
}

// selectHeaders keeps the configured response headers.
func (m *Middleware) selectHeaders(h http.Header) http.Header {
	out := http.Header{}
	for _, k := range m.cfg.ResponseHeaders {
		if v := h.Values(k); len(v) > 0 {
			out[k] = v
		}
	}
	return out
}
