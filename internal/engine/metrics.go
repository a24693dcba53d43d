package engine

import (
	"github.com/outboxd/outboxd/outboxtype"
)

// noObserver is used when the dispatcher is given no Observer.
type noObserver struct{}

func (noObserver) Observe(outboxtype.Observation) {}
