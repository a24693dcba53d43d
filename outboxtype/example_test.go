package outboxtype_test

import (
	"fmt"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
)

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
