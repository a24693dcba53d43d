package nats

// Classify is classify, for tests.
var Classify = classify

// ReconnectBuf is the client's reconnect buffer size.
func ReconnectBuf(p *Provider) int { return p.nc.Opts.ReconnectBufSize }

// Redacted is redacted, for tests.
var Redacted = redacted
