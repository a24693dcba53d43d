package main

import (
	"context"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/envflag"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/kafka"
	"github.com/outboxd/outboxd/providers/nats"
)

// brokerConfig holds the settings of the brokers outboxd run relays
// events to: NATS JetStream and Kafka, each enabled by its address.
type brokerConfig struct {
	NATSURL     string
	NATSStreams []string
	NATSTimeout time.Duration
	NATSCreds   string

	KafkaBrokers       []string
	KafkaTimeout       time.Duration
	KafkaTLS           bool
	KafkaSASLMechanism string
	KafkaSASLUser      string
	KafkaSASLPassword  string
}

func (b *brokerConfig) bind(f *pflag.FlagSet) {
	f.StringVar(&b.NATSURL, "nats-url", "", "NATS server(s) with JetStream, e.g. nats://nats:4222; enables the nats provider")
	envflag.Bind(f, "nats-url", "OUTBOXD_NATS_URL")
	envflag.Secret(f, "nats-url")
	f.StringSliceVar(&b.NATSStreams, "nats-streams", nil, "the JetStream streams nats effects publish to: the shortest duplicate window among them is the key window, and must outlast the retries")
	envflag.Bind(f, "nats-streams", "OUTBOXD_NATS_STREAMS")
	f.DurationVar(&b.NATSTimeout, "nats-timeout", nats.DefaultTimeout, "timeout of one publish, until JetStream's acknowledgement")
	envflag.Bind(f, "nats-timeout", "OUTBOXD_NATS_TIMEOUT")
	f.StringVar(&b.NATSCreds, "nats-creds", "", "NATS credentials file (JWT and NKey seed)")
	envflag.Bind(f, "nats-creds", "OUTBOXD_NATS_CREDS")
	f.StringSliceVar(&b.KafkaBrokers, "kafka-brokers", nil, "Kafka seed brokers, host:port,...; enables the kafka provider")
	envflag.Bind(f, "kafka-brokers", "OUTBOXD_KAFKA_BROKERS")
	f.DurationVar(&b.KafkaTimeout, "kafka-timeout", kafka.DefaultTimeout, "timeout of one produce, until the brokers' acknowledgement")
	envflag.Bind(f, "kafka-timeout", "OUTBOXD_KAFKA_TIMEOUT")
	f.BoolVar(&b.KafkaTLS, "kafka-tls", false, "connect to the Kafka brokers over TLS (system roots)")
	envflag.Bind(f, "kafka-tls", "OUTBOXD_KAFKA_TLS")
	f.StringVar(&b.KafkaSASLMechanism, "kafka-sasl-mechanism", "", "SASL mechanism for Kafka: plain, scram-sha-256 or scram-sha-512 (empty: none)")
	envflag.Bind(f, "kafka-sasl-mechanism", "OUTBOXD_KAFKA_SASL_MECHANISM")
	f.StringVar(&b.KafkaSASLUser, "kafka-sasl-user", "", "SASL user for Kafka")
	envflag.Bind(f, "kafka-sasl-user", "OUTBOXD_KAFKA_SASL_USER")
	f.StringVar(&b.KafkaSASLPassword, "kafka-sasl-password", "", "SASL password for Kafka")
	envflag.Bind(f, "kafka-sasl-password", "OUTBOXD_KAFKA_SASL_PASSWORD")
	envflag.Secret(f, "kafka-sasl-password")
}

// validate checks what can be checked without reaching the brokers.
func (b *brokerConfig) validate(jobTimeout time.Duration) error {
	if b.NATSTimeout < time.Millisecond {
		return cli.Usagef("--nats-timeout (OUTBOXD_NATS_TIMEOUT) is %s: it must be at least 1ms", b.NATSTimeout)
	}
	if b.KafkaTimeout < time.Second {
		return cli.Usagef("--kafka-timeout (OUTBOXD_KAFKA_TIMEOUT) is %s: it must be at least 1s", b.KafkaTimeout)
	}
	if b.NATSURL != "" && b.NATSTimeout >= jobTimeout {
		return cli.Usagef("--job-timeout (%s) must exceed --nats-timeout (%s)", jobTimeout, b.NATSTimeout)
	}
	if len(b.KafkaBrokers) > 0 && b.KafkaTimeout >= jobTimeout {
		return cli.Usagef("--job-timeout (%s) must exceed --kafka-timeout (%s)", jobTimeout, b.KafkaTimeout)
	}
	if b.NATSURL != "" && len(b.NATSStreams) == 0 {
		return cli.Usagef("--nats-url is set: name the streams nats effects publish to with --nats-streams (OUTBOXD_NATS_STREAMS): their duplicate window is the key window")
	}
	if len(b.NATSStreams) > 0 && b.NATSURL == "" {
		return cli.Usagef("--nats-streams (OUTBOXD_NATS_STREAMS) is set but --nats-url (OUTBOXD_NATS_URL) is not")
	}
	switch b.KafkaSASLMechanism {
	case "":
		if b.KafkaSASLUser != "" || b.KafkaSASLPassword != "" {
			return cli.Usagef("--kafka-sasl-user and --kafka-sasl-password need --kafka-sasl-mechanism (OUTBOXD_KAFKA_SASL_MECHANISM): plain, scram-sha-256 or scram-sha-512")
		}
	case "plain", "scram-sha-256", "scram-sha-512":
		if b.KafkaSASLUser == "" || b.KafkaSASLPassword == "" {
			return cli.Usagef("--kafka-sasl-mechanism %s needs --kafka-sasl-user and --kafka-sasl-password (OUTBOXD_KAFKA_SASL_USER, OUTBOXD_KAFKA_SASL_PASSWORD)", b.KafkaSASLMechanism)
		}
	default:
		return cli.Usagef("--kafka-sasl-mechanism (OUTBOXD_KAFKA_SASL_MECHANISM) %q: use plain, scram-sha-256 or scram-sha-512", b.KafkaSASLMechanism)
	}
	return nil
}

// build connects to the configured brokers; close closes what it built.
func (b *brokerConfig) build(ctx context.Context) (provs []providers.Provider, close func(), err error) {
	var closers []func()
	close = func() {
		for _, c := range closers {
			c()
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if b.NATSURL != "" {
		var opts []natsgo.Option
		if b.NATSCreds != "" {
			opts = append(opts, natsgo.UserCredentials(b.NATSCreds))
		}
		p, err := nats.New(ctx, nats.Config{URL: b.NATSURL, Streams: b.NATSStreams, Timeout: b.NATSTimeout, Options: opts})
		if err != nil {
			close()
			return nil, nil, cli.Usagef("NATS settings (--nats-url, --nats-streams, --nats-creds; OUTBOXD_NATS_*): %v", err)
		}
		closers = append(closers, func() { _ = p.Close() })
		provs = append(provs, p)
	}
	if len(b.KafkaBrokers) > 0 {
		var opts []kgo.Opt
		if b.KafkaTLS {
			opts = append(opts, kgo.DialTLS())
		}
		switch b.KafkaSASLMechanism {
		case "plain":
			opts = append(opts, kgo.SASL(plain.Auth{User: b.KafkaSASLUser, Pass: b.KafkaSASLPassword}.AsMechanism()))
		case "scram-sha-256":
			opts = append(opts, kgo.SASL(scram.Auth{User: b.KafkaSASLUser, Pass: b.KafkaSASLPassword}.AsSha256Mechanism()))
		case "scram-sha-512":
			opts = append(opts, kgo.SASL(scram.Auth{User: b.KafkaSASLUser, Pass: b.KafkaSASLPassword}.AsSha512Mechanism()))
		}
		p, err := kafka.New(ctx, kafka.Config{Brokers: b.KafkaBrokers, Timeout: b.KafkaTimeout, Options: opts})
		if err != nil {
			close()
			return nil, nil, cli.Usagef("Kafka settings (--kafka-brokers, --kafka-tls, --kafka-sasl-*; OUTBOXD_KAFKA_*): %v", err)
		}
		closers = append(closers, p.Close)
		provs = append(provs, p)
	}
	return provs, close, nil
}

// settings add the brokers' settings, never a secret, to what outboxctl
// dispatchers shows.
func (b *brokerConfig) settings(s map[string]any, provs []providers.Provider) {
	for _, p := range provs {
		switch p := p.(type) {
		case *nats.Provider:
			s[p.Name()] = map[string]any{"url": p.URL(), "streams": b.NATSStreams, "timeout": b.NATSTimeout.String(),
				"key_window": p.Guarantees().KeyWindow.String()}
		case *kafka.Provider:
			s[p.Name()] = map[string]any{"brokers": b.KafkaBrokers, "timeout": b.KafkaTimeout.String(), "tls": b.KafkaTLS,
				"sasl_mechanism": b.KafkaSASLMechanism}
		}
	}
}
