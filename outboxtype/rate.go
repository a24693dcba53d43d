package outboxtype

import (
	"errors"
	"fmt"
	"math"
)

// MinRate is the lowest rate a limit or a replay's pace may have, a
// second: one request every 1,000 seconds. A rate is turned into the time
// between two requests; far below this floor that time no longer fits a
// time.Duration (under about 1e-10 a second it overflows, and a limit
// would silently stop limiting).
const MinRate = 0.001

// CheckRate says what is wrong with rate, in requests (or effects) a
// second, or nil.
func CheckRate(rate float64) error {
	switch {
	case math.IsNaN(rate) || math.IsInf(rate, 0) || rate <= 0:
		return errors.New("it must be a positive number a second, for example 10")
	case rate < MinRate:
		return fmt.Errorf("%g a second is below the floor of %g (one every %.0f seconds)", rate, MinRate, 1/MinRate)
	}
	return nil
}
