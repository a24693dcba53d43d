package oncall_test

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/sideeffects/oncall"
)

// ExampleDiagnosis explains a failed effect as outboxctl stuck
// and the web view do.
func ExampleDiagnosis() {
	lastErr := outboxtype.ReasonKeyWindow
	s := outboxtype.StuckEffect{Effect: &outboxtype.Effect{ID: uuid.MustParse("0190c3a0-7b1e-7c3d-9f00-000000000001"),
		Kind: "stripe.refund", Provider: "stripe", IdempotencyKey: "4bccfbccfcac8e1f",
		State: outboxtype.StateFailed, LastError: &lastErr}}
	fmt.Println(oncall.Diagnosis(s, time.Now(), 3*time.Minute, 0))
	// Output:
	// failed: key window expired: reconcile at provider. The provider may have forgotten key 4bccfbccfcac8e1f, so a re-fire could act twice: check at the provider. Done: `outboxctl confirm --ref …`. Not done: `outboxctl retry --force` (a new key window). Not wanted: `outboxctl cancel`.
}
