package admission

import (
	"math"
	"math/rand/v2"
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

// TestLevelAgreesWithWaterfill: the water level kept from counts of
// demands gives every flow what waterfill gives it, over random demands
// and capacities (demands past the capacity included).
func TestLevelAgreesWithWaterfill(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		capacity := 1 + rng.IntN(12)
		x := float64(rng.IntN(capacity*4+1)) / 4 // real capacities too, up to the pool's
		demands := make([]int, rng.IntN(9))
		var d demandCount
		d.init(capacity)
		for j := range demands {
			demands[j] = rng.IntN(capacity + 4)
			d.move(0, demands[j])
		}
		want := waterfill(x, demands)
		level := d.levelOf(x)
		for j, dem := range demands {
			if got := min(float64(dem), level); math.Abs(got-want[j]) > 1e-9 {
				t.Fatalf("case %d: capacity %v over %v: flow %d gets %v, waterfill %v", i, x, demands, j, got, want[j])
			}
		}
	}
}
