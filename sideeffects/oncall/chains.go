package oncall

import (
	"cmp"
	"slices"

	"github.com/google/uuid"

	"github.com/outboxd/outboxd/outboxtype"
)

// ChainsUnderHeads orders stuck effects so that each blocked chain follows
// its head, in the chain's order; chains whose head is not stuck itself
// come last, in the order they were first met. outboxctl stuck and the
// web view list them so.
func ChainsUnderHeads(stuck []outboxtype.StuckEffect) []outboxtype.StuckEffect {
	behind := map[uuid.UUID][]outboxtype.StuckEffect{}
	var heads []uuid.UUID
	for _, s := range stuck {
		if s.BlockedBehind != nil {
			if _, seen := behind[*s.BlockedBehind]; !seen {
				heads = append(heads, *s.BlockedBehind)
			}
			behind[*s.BlockedBehind] = append(behind[*s.BlockedBehind], s)
		}
	}
	out := make([]outboxtype.StuckEffect, 0, len(stuck))
	chain := func(head uuid.UUID) {
		c := behind[head]
		slices.SortFunc(c, func(a, b outboxtype.StuckEffect) int { return cmp.Compare(*a.OrderingSeq, *b.OrderingSeq) })
		out = append(out, c...)
		delete(behind, head)
	}
	for _, s := range stuck {
		if s.BlockedBehind == nil {
			out = append(out, s)
			chain(s.ID)
		}
	}
	for _, h := range heads {
		chain(h)
	}
	return out
}
