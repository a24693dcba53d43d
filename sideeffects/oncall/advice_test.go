package oncall_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/sideeffects/oncall"
)

// A refusal names the option that lets the action go ahead as the surface
// offers it: the library says "a forced retry", outboxctl the flag, the
// web view the box to tick.
func TestARefusalNamesItsOverrideAsTheSurfaceOffersIt(t *testing.T) {
	id := uuid.MustParse("0190c3a0-7b1e-7c3d-9f00-000000000001")
	ch := outboxtype.Change{Effect: &outboxtype.Effect{ID: id}, Skipped: "key window closed 2h ago: … if not, a forced retry fires it again",
		Override: outboxtype.OverrideForce}
	require.Equal(t, ch.Skipped+" (`outboxctl retry "+id.String()+" --force`)", oncall.Refusal(ch, oncall.CLI))
	require.Equal(t, ch.Skipped+` (Retry on `+id.String()+` with "force" ticked)`, oncall.Refusal(ch, oncall.Web))

	ch.Override = outboxtype.OverrideAllowDuplicate
	require.Contains(t, oncall.Refusal(ch, oncall.CLI), "--allow-duplicate`)")
	require.Contains(t, oncall.Refusal(ch, oncall.Web), `"allow a duplicate" ticked)`)

	ch.Override = ""
	require.Equal(t, ch.Skipped, oncall.Refusal(ch, oncall.CLI), "a refusal no option overrides is said as it is")
}
