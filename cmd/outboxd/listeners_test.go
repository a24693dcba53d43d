package main

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestListenersCloseSlowAndIdleConnections: a client that trickles its
// headers or its body, or keeps an idle connection, is disconnected once
// the listener's bound passes, instead of holding the connection open.
func TestListenersCloseSlowAndIdleConnections(t *testing.T) {
	t.Parallel()
	short := timeouts{header: 200 * time.Millisecond, read: 400 * time.Millisecond, write: time.Second, idle: 300 * time.Millisecond}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, "ok")
	})
	srv, addr, err := serve("127.0.0.1:0", "--test-addr", "test server", h, slog.New(slog.DiscardHandler), short)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })

	// closedWithin writes part every step until the server closes the
	// connection, and reports how long that took (failing after 10s).
	closedWithin := func(t *testing.T, first string, step time.Duration) time.Duration {
		t.Helper()
		conn, err := net.Dial("tcp", addr.String())
		require.NoError(t, err)
		defer conn.Close()
		start := time.Now()
		_, err = conn.Write([]byte(first))
		require.NoError(t, err)
		closed := make(chan struct{})
		go func() {
			_, _ = io.Copy(io.Discard, conn) // returns when the server closes
			close(closed)
		}()
		for {
			select {
			case <-closed:
				return time.Since(start)
			case <-time.After(step):
				_, _ = conn.Write([]byte("x"))
			}
			require.Less(t, time.Since(start), 10*time.Second, "the server kept a slow connection open")
		}
	}

	t.Run("headers a byte at a time", func(t *testing.T) {
		took := closedWithin(t, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ", 50*time.Millisecond)
		require.Less(t, took, 5*time.Second)
	})
	t.Run("body a byte at a time", func(t *testing.T) {
		took := closedWithin(t, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n", 50*time.Millisecond)
		require.Less(t, took, 5*time.Second)
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr.String())
		require.NoError(t, err)
		defer conn.Close()
		_, err = conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		require.NoError(t, err)
		r := bufio.NewReader(conn)
		resp, err := http.ReadResponse(r, nil)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		require.Equal(t, "ok", strings.TrimSpace(string(body)))
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		_, err = r.ReadByte()
		require.ErrorIs(t, err, io.EOF, "the idle connection was closed by the server, not by the test's deadline")
	})
}

// TestAListenerHoldsAtMostItsCap: with its cap of connections open and
// idle, a listener serves no further one until one of them closes.
func TestAListenerHoldsAtMostItsCap(t *testing.T) {
	t.Parallel()
	capped := timeouts{header: 5 * time.Second, read: 5 * time.Second, write: 5 * time.Second, idle: time.Minute, maxConns: 2}
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	srv, addr, err := serve("127.0.0.1:0", "--test-addr", "test server", h, slog.New(slog.DiscardHandler), capped)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	var held []net.Conn
	for range 2 {
		conn, err := net.Dial("tcp", addr.String())
		require.NoError(t, err)
		// A request answered: the connection is accepted and kept alive.
		_, err = conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		resp.Body.Close()
		held = append(held, conn)
	}
	client := &http.Client{Timeout: 300 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	_, err = client.Get("http://" + addr.String() + "/")
	require.Error(t, err, "a third connection is not served while two are held")
	require.NoError(t, held[0].Close())
	require.Eventually(t, func() bool {
		resp, err := client.Get("http://" + addr.String() + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond, "served once one closed")
}

// blockingCollector is a gauge whose reads wait for release, as a
// database read under load does.
type blockingCollector struct {
	desc    *prometheus.Desc
	reading chan struct{}
	release chan struct{}
}

func (c *blockingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *blockingCollector) Collect(ch chan<- prometheus.Metric) {
	c.reading <- struct{}{}
	<-c.release
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1)
}

// TestMetricsServesAFewScrapesAtOnce: /metrics reads the database, so
// scrapes that pile up are answered 503 at once instead of each holding a
// connection: with metricsInFlight scrapes reading, the next is refused.
func TestMetricsServesAFewScrapesAtOnce(t *testing.T) {
	t.Parallel()
	c := &blockingCollector{desc: prometheus.NewDesc("outboxd_test_slow", "a slow read", nil, nil),
		reading: make(chan struct{}, 10), release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	srv := httptest.NewServer(metricsHandler(reg))
	t.Cleanup(srv.Close)
	var released sync.Once
	release := func() { released.Do(func() { close(c.release) }) }
	t.Cleanup(release)

	done := make(chan int, metricsInFlight)
	for range metricsInFlight {
		go func() {
			resp, err := http.Get(srv.URL)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		<-c.reading
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(srv.URL)
	require.NoError(t, err, "answered at once, not queued behind the reads")
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

	release()
	for range metricsInFlight {
		require.Equal(t, http.StatusOK, <-done)
	}
}
