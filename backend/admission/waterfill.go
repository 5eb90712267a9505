package admission

// Waterfill is the max-min fair allocation of capacity among demands, the
// one fair share computes for slots; the jobs' places are shared with it
// too.
func Waterfill(capacity float64, demands []int) []float64 { return waterfill(capacity, demands) }
