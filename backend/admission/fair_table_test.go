package admission

import (
	"slices"
	"testing"
)

// TestWaterfill: max-min fair allocation of a capacity among demands.
func TestWaterfill(t *testing.T) {
	tests := []struct {
		name     string
		capacity float64
		demands  []int
		want     []float64
	}{
		{"none", 4, nil, []float64{}},
		{"all satisfied", 10, []int{1, 2, 3}, []float64{1, 2, 3}},
		{"exactly full", 6, []int{1, 2, 3}, []float64{1, 2, 3}},
		{"6/2/1 over 4", 4, []int{6, 2, 1}, []float64{1.5, 1.5, 1}},
		{"order does not matter", 4, []int{1, 6, 2}, []float64{1, 1.5, 1.5}},
		{"equal split", 6, []int{9, 9, 9}, []float64{2, 2, 2}},
		{"small ones first", 7, []int{1, 1, 2, 40}, []float64{1, 1, 2, 3}},
		{"fractional", 7, []int{2, 2, 2, 40}, []float64{1.75, 1.75, 1.75, 1.75}},
		{"idle flows get nothing", 3, []int{0, 5, 0}, []float64{0, 3, 0}},
		{"real capacity", 2.5, []int{1, 4}, []float64{1, 1.5}},
		{"no capacity", 0, []int{1, 2}, []float64{0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := waterfill(tc.capacity, tc.demands)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("waterfill(%v, %v) = %v, want %v", tc.capacity, tc.demands, got, tc.want)
			}
		})
	}
}
