// Package stats holds the order statistics more than one package takes.
package stats

import (
	"cmp"
	"slices"
)

// LowerMedian sorts values, which must not be empty, and returns their
// lower median: a value one of them has (no mean of two), which fewer
// than half of them, however far off, cannot move past the others.
func LowerMedian[T cmp.Ordered](values []T) T {
	slices.Sort(values)
	return values[(len(values)-1)/2]
}
