// Package chaos holds outboxd's fault-injection suite: real outboxd
// processes killed with SIGKILL again and again, brokers, receivers and
// Postgres clusters taken down in the middle of dispatch, against recording
// fake providers. Its tests carry the build tag "chaos" and run with
// `make test-chaos`, never alongside other packages: their bounds are wall
// clock (a backlog drained within its ideal time plus slack), which a busy
// machine would stretch. The Postgres they stop or restart is a private
// cluster of the test's own (cluster_test.go), never the local one.
package chaos
