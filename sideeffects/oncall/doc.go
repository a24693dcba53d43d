// Package oncall is what an operator is told about effects, written once
// for outboxctl and the web view: why a stuck effect is not progressing and
// what to do (Diagnosis, Explain, WhatNow), in the words of the surface
// showing it (Surface: CLI commands or the web view's buttons), an effect's
// Timeline, what asking the provider suggests (Suggest), the dispatchers'
// and destinations' states in words, and a payload's diff.
//
// It reads the values of package outboxtype and holds no state; nothing in
// the dispatch path imports it.
package oncall
