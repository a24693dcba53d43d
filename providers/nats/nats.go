// Package nats publishes effects to NATS JetStream with nats.go.
//
// Each message carries the effect's idempotency key as Nats-Msg-Id, so
// JetStream itself drops a re-publish of the same effect within the
// stream's duplicate window and answers it with the sequence it stored
// first (recorded as a replay). That window is the provider's key window:
// New reads it from the streams the effects publish to, and outboxd run
// refuses to start when its retry schedule could outlast it. An attempt
// whose outcome is unknown (a timeout, a connection lost after the
// publish) is re-published with the same id: at least once, deduplicated
// by the server.
//
// The message body is the payload's data or, by default, the effect's
// event payload; its headers name the event, the effect and the key
// (natsschema's Header constants), so a consumer can apply each message
// once with the inbox package (dedup by Outboxd-Idempotency-Key).
//
// Outcomes: an acknowledgement confirms, with "<stream>/<sequence>" as the
// provider reference; no stream listening on the subject, or JetStream
// answering with an error, is retried (the message was not stored); a
// message over the stream's size limit or a bad request is refused. While
// the connection is down nothing is published: the server's limit key
// waits, as after a 429, and the effects spend no attempt.
package nats

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/nats/natsschema"
)

// Name is the provider name used in side_effects.provider and as River queue.
const Name = natsschema.Name

// Defaults for Config's zero values.
const (
	DefaultTimeout         = 10 * time.Second
	DefaultKeyWindowMargin = 10 * time.Second
)

// Config configures the NATS JetStream provider.
type Config struct {
	// URL is the NATS server, or several comma-separated. Required.
	URL string
	// Streams names every JetStream stream the effects publish to.
	// Required: the shortest of their duplicate windows is the key window.
	// Effects publish only to the subjects these streams capture: any
	// other subject (JetStream's own $JS.API, another stream's) is not
	// published to, and the effect is retried until a stream captures it.
	Streams []string
	// Timeout bounds one publish, until its acknowledgement. Default 10s.
	Timeout time.Duration
	// KeyWindowMargin is kept back from the duplicate window for clock
	// skew and in-flight time. Default 10s.
	KeyWindowMargin time.Duration
	// Options are passed to nats.Connect (credentials, TLS, a name), after
	// outboxd's own (no reconnect buffer: nats.ReconnectBufSize(-1)).
	Options []natsgo.Option
}

// Schema validates NATS payloads; it is what the enqueue side needs, and
// lives in natsschema so that enqueueing does not compile nats.go.
type Schema = natsschema.Schema

// Provider publishes to JetStream. It is safe for concurrent use.
type Provider struct {
	Schema
	cfg    Config
	nc     *natsgo.Conn
	js     jetstream.JetStream
	window time.Duration
	// windowStream is the stream whose duplicate window is window.
	windowStream string

	// subjects are the subject filters of the configured streams, read at
	// start and again (at most every subjectsRefresh) when a payload's
	// subject is captured by none: only those subjects are published to.
	// nowWindow is the streams' shortest duplicate window as last read,
	// of nowStream: read again at most every subjectsRefresh while
	// publishing, so that a window shortened after start is seen.
	mu         sync.Mutex
	subjects   []string
	subjectsAt time.Time
	nowWindow  time.Duration
	nowStream  string
	// triedAt is when the streams were last read, whether or not the read
	// succeeded, and reading says a read is under way: one publish reads
	// them at a time, at most every recheck after a failure, and the
	// others go on with what was read last (refresh).
	triedAt time.Time
	reading bool
}

// subjectsRefresh is how often, at most, the streams' subjects and
// windows are read again: for a subject none of them captured, and while
// publishing.
const subjectsRefresh = 10 * time.Second

var _ providers.Provider = (*Provider)(nil)

// New checks cfg, connects and reads the streams' duplicate windows.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.URL == "" {
		return nil, errors.New("URL is required, for example nats://127.0.0.1:4222")
	}
	if len(cfg.Streams) == 0 {
		return nil, errors.New("name the streams the effects publish to: their duplicate window is the key window")
	}
	if cfg.Timeout < 0 || cfg.KeyWindowMargin < 0 {
		return nil, errors.New("timeout and key window margin must not be negative")
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.KeyWindowMargin = cmp.Or(cfg.KeyWindowMargin, DefaultKeyWindowMargin)
	// No reconnect buffer: a publish made while the client reconnects
	// fails at once (nothing written) instead of waiting in a buffer that
	// is sent on reconnection, after its attempt has ended.
	opts := append([]natsgo.Option{natsgo.Name("outboxd"), natsgo.ReconnectBufSize(-1)}, cfg.Options...)
	nc, err := natsgo.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, connectError(cfg.URL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	p := &Provider{cfg: cfg, nc: nc, js: js}
	if err := p.readStreams(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	p.window, p.windowStream = p.nowWindow, p.nowStream
	if p.window <= 0 {
		nc.Close()
		return nil, fmt.Errorf("stream %q keeps no duplicate window: JetStream could not deduplicate a re-publish", p.windowStream)
	}
	if p.window <= cfg.KeyWindowMargin {
		nc.Close()
		return nil, fmt.Errorf("the streams' duplicate window (%s) must exceed the key window margin (%s)", p.window, cfg.KeyWindowMargin)
	}
	return p, nil
}

// WindowAdvice implements providers.WindowAdviser: the key window is the
// shortest duplicate window of the configured streams.
func (p *Provider) WindowAdvice(min time.Duration) string {
	up := min.Round(time.Hour)
	if up < min {
		up += time.Hour
	}
	return fmt.Sprintf("the key window is the duplicate window of JetStream stream %s: make it at least %s (nats stream edit %s --dupe-window %s)",
		p.windowStream, min, p.windowStream, strings.TrimSuffix(strings.TrimSuffix(up.String(), "0s"), "0m"))
}

// readStreams reads the subject filters of the configured streams (a
// stream with none takes its own name as its subject) and their shortest
// duplicate window.
func (p *Provider) readStreams(ctx context.Context) error {
	var subjects []string
	var window time.Duration
	var stream string
	for _, name := range p.cfg.Streams {
		s, err := p.js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("stream %q: %w", name, err)
		}
		cfg := s.CachedInfo().Config
		if subs := cfg.Subjects; len(subs) > 0 {
			subjects = append(subjects, subs...)
		} else {
			subjects = append(subjects, name)
		}
		if stream == "" || cfg.Duplicates < window {
			window, stream = cfg.Duplicates, name
		}
	}
	p.mu.Lock()
	p.subjects, p.subjectsAt, p.nowWindow, p.nowStream = subjects, time.Now(), window, stream
	p.mu.Unlock()
	return nil
}

// refresh reads the streams again when what was read is subjectsRefresh
// old, unless another publish is reading them or the last read, which
// failed, was less than recheck ago; the read is bounded by the publish
// timeout. It reports whether it read them successfully. A failed read
// keeps what was read last. Every publish asking at once, each waiting
// for a JetStream API that did not answer yet (a server just back, a
// loaded box), once held a relay's batches for tens of seconds after the
// broker was back.
func (p *Provider) refresh(ctx context.Context) bool {
	p.mu.Lock()
	now := time.Now()
	if p.reading || now.Sub(p.subjectsAt) < subjectsRefresh || now.Sub(p.triedAt) < recheck {
		p.mu.Unlock()
		return false
	}
	p.reading, p.triedAt = true, now
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	err := p.readStreams(ctx)
	p.mu.Lock()
	p.reading = false
	p.mu.Unlock()
	return err == nil
}

// windowHolds says, as an error, that a stream's duplicate window is now
// shorter than the one this provider started with and promised
// (Guarantees): a re-publish after it could be stored twice. The streams
// are read again at most every subjectsRefresh (refresh).
func (p *Provider) windowHolds(ctx context.Context) error {
	p.refresh(ctx)
	p.mu.Lock()
	now, stream := p.nowWindow, p.nowStream
	p.mu.Unlock()
	if now >= p.window {
		return nil
	}
	return fmt.Errorf("JetStream stream %s's duplicate window is now %s, shorter than the %s outboxd started with: a re-publish could be stored twice, so nothing is published; make it %s again (nats stream edit %s --dupe-window %s), or restart outboxd to work within the shorter one",
		stream, now, p.window, p.window, stream, p.window)
}

// captured reports whether a configured stream captures subject, reading
// the streams again if none did and they were read over subjectsRefresh
// ago (a subject added to a stream is published to without a restart).
func (p *Provider) captured(ctx context.Context, subject string) bool {
	p.mu.Lock()
	subjects := p.subjects
	p.mu.Unlock()
	if matchesAny(subjects, subject) {
		return true
	}
	if !p.refresh(ctx) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return matchesAny(p.subjects, subject)
}

// matchesAny reports whether subject matches one of the filters, as NATS
// matches them: "*" is one token, a trailing ">" one or more.
func matchesAny(filters []string, subject string) bool {
	tokens := strings.Split(subject, ".")
	for _, f := range filters {
		if subjectMatches(strings.Split(f, "."), tokens) {
			return true
		}
	}
	return false
}

func subjectMatches(filter, subject []string) bool {
	for i, tok := range filter {
		if tok == ">" {
			return len(subject) > i
		}
		if i >= len(subject) || (tok != "*" && tok != subject[i]) {
			return false
		}
	}
	return len(filter) == len(subject)
}

// URL is the server URL(s) of the configuration, user information hidden.
func (p *Provider) URL() string { return redacted(p.cfg.URL) }

// Close drains and closes the connection.
func (p *Provider) Close() error { return p.nc.Drain() }

// Guarantees implements providers.Provider: the shortest duplicate window
// of the streams, which outboxd run holds the retry schedule to.
func (p *Provider) Guarantees() providers.Guarantees {
	return providers.Guarantees{KeyWindow: p.window, KeyWindowMargin: p.cfg.KeyWindowMargin, InDoubt: providers.AtLeastOnce, WindowCoversRetries: true}
}

// Timeout implements providers.Timed.
func (p *Provider) Timeout() time.Duration { return p.cfg.Timeout }

// PublishesEvents implements providers.EventPublisher: a message's body
// is its event's payload unless the effect gives data.
func (p *Provider) PublishesEvents() bool { return true }

// Host implements providers.Hoster: the server connected to.
func (p *Provider) Host(json.RawMessage) string { return p.nc.ConnectedAddr() }

// Limit implements providers.Limited: every publish counts against one
// key per server (no rate of its own unless --limit sets one), so that
// while the server cannot be reached the whole key waits, for every
// replica, and the effects spend none of their attempts.
func (p *Provider) Limit(payload json.RawMessage) providers.Limit {
	if payload != nil {
		return providers.Limit{}
	}
	return providers.Limit{Key: Name + ":" + p.URL()}
}

// recheck is how long the server's key waits when the client is not
// connected before the next effect looks again. Looking costs no request
// (the client's own status), and the client reconnects every two seconds
// (nats.go's ReconnectWait): what waited goes out within about that long
// of the server answering again.
const recheck = time.Second

// Send implements providers.Provider.
func (p *Provider) Send(ctx context.Context, req providers.Request) (providers.Result, error) {
	pub, err := natsschema.Parse(req.Payload)
	if err != nil {
		return providers.Result{}, providers.Refused(err)
	}
	if st := p.nc.Status(); st != natsgo.CONNECTED {
		// A request made now would wait in the client's reconnect buffer,
		// its outcome unknown: none is made, and the server's key waits.
		return providers.Result{}, providers.Unreachable(fmt.Errorf("not connected to NATS (%s): nothing was published", st), recheck)
	}
	if err := p.windowHolds(ctx); err != nil {
		// Every effect of the provider waits, spending no attempt, until
		// the window is as long again.
		return providers.Result{}, providers.Held(err, subjectsRefresh)
	}
	if !p.captured(ctx, pub.Subject) {
		// Publishing elsewhere would reach what the configured streams do
		// not hold, JetStream's own API included, with outboxd's
		// credentials: nothing is sent.
		return providers.Result{}, providers.Retryable(fmt.Errorf("no stream of --nats-streams (%s) captures subject %q: nothing was published; add the subject to one of them",
			strings.Join(p.cfg.Streams, ", "), pub.Subject), subjectsRefresh)
	}
	msg := natsgo.NewMsg(pub.Subject)
	msg.Data = pub.Data
	for k, v := range pub.Headers {
		msg.Header.Set(k, v)
	}
	msg.Header.Set(natsschema.HeaderKey, req.Key)
	msg.Header.Set(natsschema.HeaderEffectID, req.EffectID)
	msg.Header.Set(natsschema.HeaderKind, req.Kind)
	msg.Header.Set(natsschema.HeaderEventID, req.EventID)
	if ev := req.Event; ev != nil {
		msg.Header.Set(natsschema.HeaderEventType, ev.Type)
		msg.Header.Set(natsschema.HeaderAggregateType, ev.AggregateType)
		msg.Header.Set(natsschema.HeaderAggregateID, ev.AggregateID)
		if len(msg.Data) == 0 {
			msg.Data = ev.Payload
		}
	}
	if len(msg.Data) == 0 {
		return providers.Result{}, providers.Refused(errors.New("payload.data: no data and no event payload to publish"))
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	// One request per attempt: a "no responders" is retried by outboxd's
	// schedule, not within the call.
	ack, err := p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(req.Key), jetstream.WithRetryAttempts(0))
	if err != nil {
		return providers.Result{}, classify(err)
	}
	return providers.Result{Ref: ack.Stream + "/" + strconv.FormatUint(ack.Sequence, 10), Replayed: ack.Duplicate}, nil
}

// maxScan bounds the messages Lookup reads.
const maxScan = 100_000

// Lookup implements providers.Reconciler: it reads the messages of the
// payload's subject stored within the stream's duplicate window (the only
// ones a re-publish would be deduplicated against), headers only, and
// returns the one whose Nats-Msg-Id is key. JetStream has no index by
// message id: the read is bounded (100,000 messages), and says so when it
// stops short.
func (p *Provider) Lookup(ctx context.Context, payload json.RawMessage, key string) ([]providers.Found, string, error) {
	return lookup(ctx, p.js, payload, key)
}

// Asker asks JetStream what it holds for an effect's key, as
// Provider.Lookup does, without publishing: what outboxctl reconcile uses.
type Asker struct {
	nc *natsgo.Conn
	js jetstream.JetStream
}

var _ providers.Reconciler = (*Asker)(nil)

// NewAsker connects to url (user information hidden in its errors).
func NewAsker(url string, opts ...natsgo.Option) (*Asker, error) {
	nc, err := natsgo.Connect(url, append([]natsgo.Option{natsgo.Name("outboxctl")}, opts...)...)
	if err != nil {
		return nil, connectError(url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &Asker{nc: nc, js: js}, nil
}

// Close closes the connection.
func (a *Asker) Close() { a.nc.Close() }

// Lookup implements providers.Reconciler (see Provider.Lookup).
func (a *Asker) Lookup(ctx context.Context, payload json.RawMessage, key string) ([]providers.Found, string, error) {
	return lookup(ctx, a.js, payload, key)
}

func lookup(ctx context.Context, js jetstream.JetStream, payload json.RawMessage, key string) ([]providers.Found, string, error) {
	pub, err := natsschema.Parse(payload)
	if err != nil {
		return nil, "", err
	}
	name, err := js.StreamNameBySubject(ctx, pub.Subject)
	if err != nil {
		return nil, "", fmt.Errorf("no stream captures %q: %w", pub.Subject, err)
	}
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, "", err
	}
	window := s.CachedInfo().Config.Duplicates
	since := time.Now().Add(-window)
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{pub.Subject},
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since, HeadersOnly: true})
	if err != nil {
		return nil, "", err
	}
	how := fmt.Sprintf("read stream %s's messages on %s stored in its %s duplicate window, for %s: %s", name, pub.Subject, window, jetstream.MsgIDHeader, key)
	scanned := 0
	for scanned < maxScan {
		batch, err := c.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, how, err
		}
		got := 0
		var pending uint64
		for msg := range batch.Messages() {
			got++
			meta, err := msg.Metadata()
			if err != nil {
				return nil, how, err
			}
			pending = meta.NumPending
			if msg.Headers().Get(jetstream.MsgIDHeader) == key {
				ref := name + "/" + strconv.FormatUint(meta.Sequence.Stream, 10)
				return []providers.Found{{ID: ref, Object: "message", Status: "stored", Created: meta.Timestamp}}, how, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, natsgo.ErrTimeout) {
			return nil, how, err
		}
		scanned += got
		if got == 0 || pending == 0 {
			return nil, how + fmt.Sprintf(" (%d read, none carries it)", scanned), nil
		}
	}
	return nil, how + fmt.Sprintf(" (stopped after %d messages: not found among them)", scanned), nil
}

// classify sorts a publish's failure: a message JetStream did not store is
// retried, one it cannot store is refused, and anything else (a timeout,
// a connection lost after the publish) is in doubt.
func classify(err error) error {
	var api *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, natsgo.ErrNoResponders):
		return providers.Retryable(fmt.Errorf("no JetStream stream answered for the subject (is one capturing it?): %w", err), 5*time.Second)
	case errors.As(err, &api):
		if api.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum || api.Code == 400 {
			return providers.Refused(fmt.Errorf("JetStream refused the message: %w", err))
		}
		return providers.Retryable(fmt.Errorf("JetStream did not store the message: %w", err), 5*time.Second)
	case errors.Is(err, natsgo.ErrReconnectBufExceeded):
		// The connection dropped between the look at it and the publish:
		// nothing was written, and the server's key waits as it would
		// have.
		return providers.Unreachable(fmt.Errorf("not connected to NATS (reconnecting): nothing was published: %w", err), recheck)
	case errors.Is(err, natsgo.ErrConnectionClosed), errors.Is(err, natsgo.ErrMaxPayload), errors.Is(err, natsgo.ErrBadSubject):
		// Refused by the client before anything was written.
		if errors.Is(err, natsgo.ErrConnectionClosed) {
			return providers.Retryable(err, 5*time.Second)
		}
		return providers.Refused(fmt.Errorf("JetStream refused the message: %w", err))
	}
	return providers.InDoubt(err)
}

// redacted is urls with the user information of each hidden, in every form
// the client accepts: nats.go reads a URL without "://" as nats://, so
// "user:pass@host:4222" has a password too. A URL that does not parse
// keeps only what follows its last "@".
func redacted(urls string) string {
	parts := strings.Split(urls, ",")
	for i, raw := range parts {
		raw = strings.TrimSpace(raw)
		s := raw
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		u, err := url.Parse(s)
		switch {
		case err != nil:
			if at := strings.LastIndex(raw, "@"); at >= 0 {
				parts[i] = "redacted@" + raw[at+1:]
			}
		case u.User != nil:
			u.User = url.User("redacted")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// connectError is err from connecting to urls, without the URLs' user
// information: nats.go's own error quotes a URL it could not parse, and
// its parser's detail may quote part of a password, so that error is
// replaced whole.
func connectError(urls string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("connect to %s: a URL does not parse: the form is nats://[user:password@]host:port, several joined by commas", redacted(urls))
	}
	msg := err.Error()
	for _, raw := range strings.Split(urls, ",") {
		if raw = strings.TrimSpace(raw); raw != "" {
			msg = strings.ReplaceAll(msg, raw, redacted(raw))
		}
	}
	if msg == err.Error() {
		return fmt.Errorf("connect to %s: %w", redacted(urls), err)
	}
	return fmt.Errorf("connect to %s: %s", redacted(urls), msg)
}
