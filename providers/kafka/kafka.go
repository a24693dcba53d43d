// Package kafka produces effects to Kafka with franz-go.
//
// The producer is idempotent with acks=all (franz-go's defaults, kept):
// within one producer session the broker drops a batch the client re-sent.
// Kafka does not deduplicate across sessions, so an attempt whose outcome
// is unknown (a timeout, a connection lost after the request, a crash) is
// produced again, and the record may then be in the topic twice. Every
// record carries the effect's idempotency key in its outboxd-idempotency-key
// header, the same on every attempt: consumers apply each key once (the
// inbox package does it in the consumer's own transaction). The provider
// has no key window: nothing bounds when a re-publish may happen.
//
// The record's key is the payload's key or, by default, the event's
// aggregate id, so that one aggregate's records share a partition; its
// value is the payload's value or the event's payload. Effects with an
// ordering key are produced one after another, in commit order.
//
// Outcomes: the broker's acknowledgement confirms, with
// "<topic>/<partition>/<offset>" as the provider reference; a topic that
// does not exist or a refused authorization is retried (nothing was
// written); a record over the size limit or an invalid topic is refused;
// anything else is in doubt and produced again. While no broker can be
// reached (the last dial failed, no connection open, a ping unanswered),
// nothing is produced: the cluster's limit key waits, as after a 429, and
// the effects spend no attempt.
package kafka

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/kafka/kafkaschema"
)

// Name is the provider name used in side_effects.provider and as River queue.
const Name = kafkaschema.Name

// DefaultTimeout bounds one produce, until the broker's acknowledgement.
const DefaultTimeout = 10 * time.Second

// Config configures the Kafka provider.
type Config struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string
	// Timeout bounds one produce. Default 10s.
	Timeout time.Duration
	// Options are passed to kgo.NewClient after outboxd's own (SASL, TLS,
	// a client id). They may not turn off idempotent writes or acks=all.
	Options []kgo.Opt
}

// Schema validates Kafka payloads; it is what the enqueue side needs, and
// lives in kafkaschema so that enqueueing does not compile franz-go.
type Schema = kafkaschema.Schema

// Provider produces records. It is safe for concurrent use.
type Provider struct {
	Schema
	cfg    Config
	cl     *kgo.Client
	health *health
}

// health follows the client's connections to the brokers: the brokers are
// out of reach when the last dial failed and no connection is open.
type health struct {
	open   atomic.Int64
	failed atomic.Bool
	// connects counts the connections ever opened: a produce that began
	// with none open and saw none opened could not have written anything.
	connects atomic.Int64
}

func (h *health) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		h.failed.Store(true)
		return
	}
	h.open.Add(1)
	h.connects.Add(1)
	h.failed.Store(false)
}

// connections is the number open now and the number ever opened.
func (h *health) connections() (open, ever int64) { return h.open.Load(), h.connects.Load() }

func (h *health) OnBrokerDisconnect(kgo.BrokerMetadata, net.Conn) { h.open.Add(-1) }

func (h *health) down() bool { return h.failed.Load() && h.open.Load() <= 0 }

var _ providers.Provider = (*Provider)(nil)

// New checks cfg, and connects to the brokers.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("brokers are required, for example 127.0.0.1:9092")
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	if cfg.Timeout < time.Second {
		return nil, fmt.Errorf("timeout is %s: it must be at least 1s (franz-go's shortest record delivery timeout)", cfg.Timeout)
	}
	h := &health{}
	opts := append([]kgo.Opt{
		kgo.WithHooks(h),
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID("outboxd"),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(cfg.Timeout),
		kgo.ProducerLinger(0),
	}, cfg.Options...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("reach the brokers %s: %w", strings.Join(cfg.Brokers, ","), err)
	}
	return &Provider{cfg: cfg, cl: cl, health: h}, nil
}

// Close flushes and closes the client.
func (p *Provider) Close() { p.cl.Close() }

// Guarantees implements providers.Provider: re-published with the same
// key header, deduplicated by consumers; no window.
func (p *Provider) Guarantees() providers.Guarantees {
	return providers.Guarantees{InDoubt: providers.AtLeastOnce}
}

// Timeout implements providers.Timed.
func (p *Provider) Timeout() time.Duration { return p.cfg.Timeout }

// PublishesEvents implements providers.EventPublisher: a record's key and
// value default to its event's aggregate id and payload.
func (p *Provider) PublishesEvents() bool { return true }

// Host implements providers.Hoster: the seed brokers.
func (p *Provider) Host(json.RawMessage) string { return strings.Join(p.cfg.Brokers, ",") }

// Limit implements providers.Limited: every produce counts against one
// key per cluster (no rate of its own unless --limit sets one), so that
// while no broker can be reached the whole key waits, for every replica,
// and the effects spend none of their attempts.
func (p *Provider) Limit(payload json.RawMessage) providers.Limit {
	if payload != nil {
		return providers.Limit{}
	}
	return providers.Limit{Key: Name + ":" + strings.Join(p.cfg.Brokers, ",")}
}

// Send implements providers.Provider.
func (p *Provider) Send(ctx context.Context, req providers.Request) (providers.Result, error) {
	r, err := kafkaschema.Parse(req.Payload)
	if err != nil {
		return providers.Result{}, providers.Refused(err)
	}
	if p.health.down() {
		// The last dial failed and no connection is open: a produce now
		// would wait out its timeout, its outcome unknown. One ping tells
		// whether a broker answers again; if none does, nothing is
		// produced and the cluster's key waits.
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := p.cl.Ping(pctx)
		cancel()
		if err != nil {
			return providers.Result{}, providers.Unreachable(fmt.Errorf("no Kafka broker can be reached (%v): nothing was produced", err), 2*time.Second)
		}
	}
	rec := &kgo.Record{Topic: r.Topic, Value: r.Value}
	if r.Key != nil {
		rec.Key = []byte(*r.Key)
	}
	for k, v := range r.Headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	header := func(k, v string) { rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)}) }
	header(kafkaschema.HeaderKey, req.Key)
	header(kafkaschema.HeaderEffectID, req.EffectID)
	header(kafkaschema.HeaderKind, req.Kind)
	header(kafkaschema.HeaderEventID, req.EventID)
	if ev := req.Event; ev != nil {
		header(kafkaschema.HeaderEventType, ev.Type)
		header(kafkaschema.HeaderAggregateType, ev.AggregateType)
		header(kafkaschema.HeaderAggregateID, ev.AggregateID)
		if r.Key == nil && ev.AggregateID != "" {
			rec.Key = []byte(ev.AggregateID)
		}
		if len(rec.Value) == 0 {
			rec.Value = ev.Payload
		}
	}
	if len(rec.Value) == 0 {
		return providers.Result{}, providers.Refused(errors.New("payload.value: no value and no event payload to produce"))
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	open, ever := p.health.connections()
	got, err := p.cl.ProduceSync(ctx, rec).First()
	if err != nil {
		if _, now := p.health.connections(); open <= 0 && now == ever {
			// No connection was open when the produce began and none
			// opened while it lasted: the record was written nowhere.
			return providers.Result{}, providers.Unreachable(fmt.Errorf("no Kafka broker could be reached: nothing was produced: %w", err), 2*time.Second)
		}
		return providers.Result{}, classify(err)
	}
	return providers.Result{Ref: fmt.Sprintf("%s/%d/%d", got.Topic, got.Partition, got.Offset)}, nil
}

// classify sorts a produce's failure: a record the brokers did not take is
// retried, one they cannot take is refused, anything else is in doubt.
func classify(err error) error {
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		return providers.Retryable(fmt.Errorf("no such topic (create it, or let the brokers create topics): %w", err), 30*time.Second)
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		return providers.Retryable(fmt.Errorf("not authorized to produce: %w", err), time.Minute)
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge), errors.Is(err, kerr.InvalidTopicException),
		errors.Is(err, kerr.InvalidRecord):
		return providers.Refused(fmt.Errorf("kafka refused the record: %w", err))
	}
	return providers.InDoubt(err)
}
