package fakes

import (
	"errors"
	"net"
	"net/http"
	"time"
)

// Server is a local HTTP server on a free loopback port, as the fakes need
// it both in tests and in outboxd's demo (which must not link the test
// packages).
type Server struct {
	// URL is the server's base URL, http://127.0.0.1:port.
	URL string
	srv *http.Server
}

// newServer starts h on 127.0.0.1 on a free port.
func newServer(h http.Handler) *Server {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic("fakes: listen on loopback: " + err.Error())
	}
	s := &Server{URL: "http://" + ln.Addr().String(), srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			panic("fakes: serve: " + err.Error())
		}
	}()
	return s
}

// Close stops the server at once, closing open connections (requests
// blocked in a handler see their context cancelled).
func (s *Server) Close() { _ = s.srv.Close() }
