package kafka_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/testbrokers"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/kafka/kafkaschema"
	"github.com/outboxd/outboxd/providers/providertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Fixture{New: func(t *testing.T) providertest.Setup {
		c, brokers, err := testbrokers.StartKafka(1)
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return providertest.Setup{
			Kind:     "kafka.order_paid",
			Provider: newProvider(t, brokers),
			Payload:  json.RawMessage(`{"topic": "orders"}`),
			Event:    &providers.SourceEvent{ID: "0190c3a0-7b1e-7c3d-9f00-000000000001", Type: "order.paid", Payload: json.RawMessage(`{"order": "o_42"}`)},
			Keys: func(t *testing.T, n int) []string {
				var keys []string
				for _, r := range consumeAll(t, brokers, "orders", n) {
					keys = append(keys, header(r, kafkaschema.HeaderKey))
				}
				return keys
			},
			// The broker refuses the next produce as a record it cannot store.
			Reject: func() {
				c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
					req := kr.(*kmsg.ProduceRequest)
					resp := req.ResponseKind().(*kmsg.ProduceResponse)
					for _, rt := range req.Topics {
						st := kmsg.NewProduceResponseTopic()
						st.Topic, st.TopicID = rt.Topic, rt.TopicID
						for _, rp := range rt.Partitions {
							sp := kmsg.NewProduceResponseTopicPartition()
							sp.Partition, sp.ErrorCode = rp.Partition, kerr.InvalidRecord.Code
							st.Partitions = append(st.Partitions, sp)
						}
						resp.Topics = append(resp.Topics, st)
					}
					return resp, nil, true
				})
			},
			Unreachable: func(*testing.T) { c.Close() },
		}
	}})
}

// consumeAll reads topic from the start until it has at least n records
// and a further look finds no more.
func consumeAll(t *testing.T, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var out []*kgo.Record
	for {
		wait := 10 * time.Second
		if len(out) >= n {
			wait = 500 * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		fs := cl.PollFetches(ctx)
		cancel()
		got := fs.Records()
		if len(got) == 0 && len(out) >= n {
			return out
		}
		require.False(t, len(got) == 0 && len(out) < n, "only %d of %d records arrived", len(out), n)
		out = append(out, got...)
	}
}
