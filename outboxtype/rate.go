package outboxtype

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode"
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

// MaxLimitKey is the longest a limit key may be, in bytes: the longest
// key outboxd makes (a webhook host and port, a tenant, an endpoint) fits
// well within it, and every key is a label of /metrics and a row shown to
// operators.
const MaxLimitKey = 300

// CheckLimitKey says what is wrong with a limit key an operator names,
// or nil.
func CheckLimitKey(key string) error {
	switch {
	case key == "":
		return errors.New("the key is empty: name a provider (stripe), a destination (webhook:<host>) or a tenant (tenant:<name>)")
	case len(key) > MaxLimitKey:
		return fmt.Errorf("the key is %d bytes long: at most %d", len(key), MaxLimitKey)
	}
	for _, r := range key {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return fmt.Errorf("the key %q holds a space or control character", key)
		}
	}
	return nil
}

// CheckRateInAnySecond says what is wrong with rate held as "at most rate
// requests in any second", or nil: a whole number, at least 1.
func CheckRateInAnySecond(rate float64) error {
	if err := CheckRate(rate); err != nil {
		return err
	}
	if rate < 1 || rate != math.Trunc(rate) {
		return fmt.Errorf("%g: a rate held in any second is a whole number of requests, at least 1 (e.g. 4)", rate)
	}
	return nil
}

// RateText is a limit's rate for people: a tenth of a unit from 1/s up,
// three significant digits below (a replay's pace of 0.01/s is not
// "0/s"); "at most N in any second" for a rate held that way.
func RateText(rate float64, inAnySecond bool) string {
	if inAnySecond {
		return fmt.Sprintf("at most %g in any second", rate)
	}
	if rate < 1 {
		return strconv.FormatFloat(rate, 'g', 3, 64) + "/s"
	}
	return strconv.FormatFloat(math.Round(rate*10)/10, 'f', -1, 64) + "/s"
}
