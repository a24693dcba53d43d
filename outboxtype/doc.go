// Package outboxtype holds the values outboxd's two faces share: an effect
// as stored (Effect) and its State, the event it belongs to, what an
// operator action did (Change) and what the reads return (Stats,
// StuckEffect, Job, AuditEntry, Attempt, DriftRecord, …), with the failure,
// action and drift reasons recorded in the tables. It holds data and the
// rules of the data (a retry policy's delays, a state's phase); what an
// operator is told about it (diagnosis, advice, timeline) is package
// sideeffects/oncall.
//
// It imports nothing of outboxd, the way River keeps its own shared types
// in rivertype: package outbox (enqueue), package sideeffects (dispatch
// and operate), the providers (a call's Result, an EventReport, a
// DestinationState, what a provider Found, which package providers names
// for them) and the engine below them all speak in these types, by these
// names (the engine keeps no aliases of them), so that reading one never
// means importing the others.
package outboxtype
