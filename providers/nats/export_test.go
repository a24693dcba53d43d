package nats

import (
	"context"
	"time"
)

// Classify is classify, for tests.
var Classify = classify

// ReconnectBuf is the client's reconnect buffer size.
func ReconnectBuf(p *Provider) int { return p.nc.Opts.ReconnectBufSize }

// Redacted is redacted, for tests.
var Redacted = redacted

// ReadStreams reads the streams' subjects and windows now, as the
// provider does at most every 10 s.
func ReadStreams(p *Provider) error { return p.readStreams(context.Background()) }

// AgeStreams makes what was read of the streams, and the last try to read
// them, old: the next publish reads them again.
func AgeStreams(p *Provider) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.subjectsAt, p.triedAt = time.Time{}, time.Time{}
}
