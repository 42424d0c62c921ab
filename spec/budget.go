package spec

import (
	"fmt"
	"math"
)

// A budget's period, as the management API, the store and the Terraform
// provider spell it. Days and months are UTC calendar days and months;
// total never resets.
const (
	PeriodDay   = "day"
	PeriodMonth = "month"
	PeriodTotal = "total"
)

// BudgetPeriods lists every period, shortest first.
var BudgetPeriods = []string{PeriodDay, PeriodMonth, PeriodTotal}

// What a spent budget does: refuse requests (402) or send them to its
// fallback model.
const (
	OnExhaustedRefuse   = "refuse"
	OnExhaustedFallback = "fallback"
)

// OnExhaustedActions lists every action; the first is the default.
var OnExhaustedActions = []string{OnExhaustedRefuse, OnExhaustedFallback}

// CheckBudgetAmount says what is wrong with a budget's amount, or "": it is
// a finite number of at least 0 (NaN and infinity cannot be stored, encoded
// or compared with a spend).
func CheckBudgetAmount(a float64) string {
	if math.IsNaN(a) || math.IsInf(a, 0) || a < 0 {
		return fmt.Sprintf("must be a finite number of at least 0, got %v", a)
	}
	return ""
}
