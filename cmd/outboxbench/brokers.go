package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/internal/testbrokers"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/kafka"
	"github.com/outboxd/outboxd/providers/nats"
)

// counting counts a provider's acknowledged sends, keeping what the
// dispatcher asks of it (its event, its timeout).
type counting struct {
	providers.Provider
	sent atomic.Int64
}

func (c *counting) Send(ctx context.Context, req providers.Request) (providers.Result, error) {
	res, err := c.Provider.Send(ctx, req)
	if err == nil {
		c.sent.Add(1)
	}
	return res, err
}

func (c *counting) PublishesEvents() bool {
	ep, ok := c.Provider.(providers.EventPublisher)
	return ok && ep.PublishesEvents()
}

func (c *counting) Timeout() time.Duration {
	if t, ok := c.Provider.(providers.Timed); ok {
		return t.Timeout()
	}
	return 0
}

// brokerRelay burns down effects relayed to NATS JetStream and to Kafka,
// both real servers in this process (nats-server, franz-go's kfake), with
// the body read from each effect's event, beside the no-op provider and
// Watermill's forwarder publishing to the same broker.
func (b *bench) brokerRelay(ctx context.Context) ([]dispatchResult, error) {
	n := b.s.BrokerEffects
	noop := &noopProvider{}
	base, err := b.burnDown(ctx, "outboxd, no-op provider", n, noop, `{}`, func() int { return int(noop.calls.Load()) })
	if err != nil {
		return nil, err
	}
	out := []dispatchResult{base}

	broker, err := testbrokers.StartJetStream(ctx, 6*time.Hour)
	if err != nil {
		return nil, err
	}
	defer broker.Close()
	np, err := nats.New(ctx, nats.Config{URL: broker.URL, Streams: []string{testbrokers.Stream}})
	if err != nil {
		return nil, err
	}
	defer np.Close()
	cn := &counting{Provider: np}
	r, err := b.burnDown(ctx, "outboxd → NATS JetStream (nats-server in process)", n, cn, `{"subject": "orders.paid"}`, func() int { return int(cn.sent.Load()) })
	if err != nil {
		return nil, err
	}
	r.VsNoop = r.PerSecond / base.PerSecond
	natsRow := len(out)
	out = append(out, r)

	cluster, brokers, err := testbrokers.StartKafka(3)
	if err != nil {
		return nil, err
	}
	defer cluster.Close()
	kp, err := kafka.New(ctx, kafka.Config{Brokers: brokers})
	if err != nil {
		return nil, err
	}
	defer kp.Close()
	ck := &counting{Provider: kp}
	r, err = b.burnDown(ctx, "outboxd → Kafka (kfake in process)", n, ck, `{"topic": "orders"}`, func() int { return int(ck.sent.Load()) })
	if err != nil {
		return nil, err
	}
	r.VsNoop = r.PerSecond / base.PerSecond
	kafkaRow := len(out)
	out = append(out, r)

	if b.wm != nil {
		for _, peer := range []struct {
			row      int
			name, to string
		}{
			{natsRow, "Watermill SQL forwarder → NATS JetStream (watermill-nats)", "nats=" + broker.URL},
			{kafkaRow, "Watermill SQL forwarder → Kafka (watermill-kafka, sarama)", "kafka=" + strings.Join(brokers, ",")},
		} {
			fmt.Fprintf(os.Stderr, "  %s: %d ...\n", peer.name, n)
			w, err := b.wm.run(ctx, "-mode", "forward", "-messages", strconv.Itoa(n), "-to", peer.to)
			if err != nil {
				return nil, err
			}
			row := dispatchResult{Name: peer.name, N: w.Count, Seconds: w.Seconds, PerSecond: w.PerSecond}
			out[peer.row].VsWatermill = out[peer.row].PerSecond / row.PerSecond
			out = append(out, row)
		}
	}
	return out, b.vacuum(ctx)
}
