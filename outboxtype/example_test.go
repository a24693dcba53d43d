package outboxtype_test

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/outboxd/outboxd/outboxtype"
)

// ExampleStuckEffect_Diagnosis explains a failed effect as outboxctl stuck
// and the web view do.
func ExampleStuckEffect_Diagnosis() {
	lastErr := outboxtype.ReasonKeyWindow
	s := outboxtype.StuckEffect{Effect: &outboxtype.Effect{ID: uuid.MustParse("0190c3a0-7b1e-7c3d-9f00-000000000001"),
		Kind: "stripe.refund", Provider: "stripe", IdempotencyKey: "4bccfbccfcac8e1f",
		State: outboxtype.StateFailed, LastError: &lastErr}}
	fmt.Println(s.Diagnosis(time.Now(), 3*time.Minute, 0))
	// Output:
	// failed: key window expired: reconcile at provider. The provider may have forgotten key 4bccfbccfcac8e1f, so a re-fire could act twice: check at the provider. Done: `outboxctl confirm --ref …`. Not done: `outboxctl retry --force` (a new key window). Not wanted: `outboxctl cancel`.
}

// ExampleRetryPolicy_Delay shows the retry schedule's bounds: each delay is
// jittered between half and all of min(MaxDelay, BaseDelay × 2^(attempt-1)).
func ExampleRetryPolicy_Delay() {
	p := outboxtype.RetryPolicy{BaseDelay: time.Second, MaxDelay: time.Minute}
	for _, attempt := range []int{1, 4, 10} {
		d := p.Delay(attempt)
		fmt.Println(attempt, d >= p.BaseDelay<<(attempt-1)/2 || d >= p.MaxDelay/2, d <= min(p.MaxDelay, p.BaseDelay<<(attempt-1)))
	}
	// Output:
	// 1 true true
	// 4 true true
	// 10 true true
}
