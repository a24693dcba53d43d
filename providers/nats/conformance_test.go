package nats_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testbrokers"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/nats/natsschema"
	"github.com/outboxd/outboxd/providers/providertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Fixture{New: func(t *testing.T) providertest.Setup {
		ctx := context.Background()
		j, err := testbrokers.StartJetStream(ctx, time.Hour)
		require.NoError(t, err)
		t.Cleanup(j.Close)
		return providertest.Setup{
			Kind:     "nats.order_paid",
			Provider: newProvider(t, j.URL),
			Payload:  json.RawMessage(`{"subject": "orders.paid"}`),
			Event:    &providers.SourceEvent{ID: "0190c3a0-7b1e-7c3d-9f00-000000000001", Type: "order.paid", Payload: json.RawMessage(`{"order": "o_42"}`)},
			// What the stream stored: a publish is acknowledged once it is.
			Keys: func(t *testing.T, _ int) []string {
				info, err := j.Stream.Info(ctx)
				require.NoError(t, err)
				var keys []string
				for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
					msg, err := j.Stream.GetMsg(ctx, seq)
					require.NoError(t, err)
					require.Equal(t, msg.Header.Get(natsschema.HeaderMsgID), msg.Header.Get(natsschema.HeaderKey))
					keys = append(keys, msg.Header.Get(natsschema.HeaderMsgID))
				}
				return keys
			},
			// A stream that stores no message this large refuses it.
			Reject: func() {
				cfg := j.Stream.CachedInfo().Config
				cfg.MaxMsgSize = 8
				_, err := j.JS.UpdateStream(ctx, cfg)
				require.NoError(t, err)
			},
			Unreachable: func(*testing.T) { j.Down() },
		}
	}})
}
