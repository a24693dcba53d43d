// Package testbrokers runs real brokers inside a test's process: a NATS
// server with JetStream (nats-server) and a Kafka cluster (franz-go's
// kfake), for the tests and the benchmark of outboxd's broker providers.
package testbrokers

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Stream is the stream StartJetStream creates: ORDERS, on the subjects
// orders and orders.>.
const Stream = "ORDERS"

// JetStream is a running NATS server with JetStream.
type JetStream struct {
	URL    string
	JS     jetstream.JetStream
	Stream jetstream.Stream
	stop   func()
	opts   *server.Options
	srv    *server.Server
}

// Close shuts the server down and removes its storage.
func (j *JetStream) Close() { j.stop() }

// Down shuts the server down as an outage would, keeping its storage:
// clients get connection refused until Up.
func (j *JetStream) Down() {
	j.srv.Shutdown()
	j.srv.WaitForShutdown()
}

// Up starts the server again on the same port with the same storage, so
// its streams and their message ids come back.
func (j *JetStream) Up() error {
	srv, err := server.NewServer(j.opts)
	if err != nil {
		return err
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("nats-server did not start again")
	}
	j.srv = srv
	return nil
}

// StartJetStream starts a NATS server with JetStream on a free loopback
// port, with file storage in a directory of its own, and creates stream
// ORDERS keeping message ids for window.
func StartJetStream(ctx context.Context, window time.Duration) (*JetStream, error) {
	dir, err := os.MkdirTemp("", "outboxd-nats")
	if err != nil {
		return nil, err
	}
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true}
	srv, err := server.NewServer(opts)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go srv.Start()
	j := &JetStream{opts: opts, srv: srv}
	stop := func() { j.srv.Shutdown(); j.srv.WaitForShutdown(); os.RemoveAll(dir) }
	if !srv.ReadyForConnections(10 * time.Second) {
		stop()
		return nil, fmt.Errorf("nats-server did not start")
	}
	// Up starts again on the port this start was given.
	opts.Port = srv.Addr().(*net.TCPAddr).Port
	nc, err := natsgo.Connect(srv.ClientURL(), natsgo.MaxReconnects(-1))
	if err != nil {
		stop()
		return nil, err
	}
	j.URL, j.stop = srv.ClientURL(), func() { nc.Close(); stop() }
	if j.JS, err = jetstream.New(nc); err == nil {
		j.Stream, err = j.JS.CreateStream(ctx, jetstream.StreamConfig{Name: Stream, Subjects: []string{"orders", "orders.>"}, Duplicates: window})
	}
	if err != nil {
		j.Close()
		return nil, err
	}
	return j, nil
}

// StartKafka starts a one-broker Kafka cluster with topic orders in the
// given number of partitions, and returns it and its addresses.
func StartKafka(partitions int32) (*kfake.Cluster, []string, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "orders"))
	if err != nil {
		return nil, nil, err
	}
	return c, c.ListenAddrs(), nil
}
