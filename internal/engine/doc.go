// Package engine owns the side_effects state machine and the River workers
// that drive it, behind the two public faces: package outbox (enqueue)
// and package sideeffects (dispatch and operate).
//
//	pending --claim (committed before the provider is called)--> fired
//	fired   --acknowledged (same tx completes the River job)--> confirmed
//	fired   --retryable (provider did not act)--> pending, retried later
//	fired   --in doubt (timeout, crash)--> fired, re-fired with the same key
//	pending|fired --permanent, retries exhausted, key window passed--> failed
//
// The engine holds the rules: when to claim, fire, wait, retry or give up
// (worker.go, dispatch_batch.go), the enqueue protocol (enqueue.go), the
// limits shared by replicas (limits.go, limiter.go), ordering chains
// (chains.go), the intake and tenants' shares (intake.go, tenants.go),
// running paced replays (replay.go) and the leader's periodic work
// (maintenance.go). What people do by hand (retry, cancel, confirm, start
// a replay, lift a hold) is sideeffects.Operator's, above it. Every
// statement it runs is a method of package store, below it; the engine
// writes no SQL.
package engine
