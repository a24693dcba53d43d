// Package chaos holds outboxd's fault-injection suite: a real outboxd
// process killed with SIGKILL again and again, and Postgres restarted in the
// middle of dispatch, against recording fake providers. Its tests carry the
// build tag "chaos" and run with `make test-chaos`, never alongside other
// packages: restarting Postgres would disturb them.
package chaos
