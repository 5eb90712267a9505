package units

import (
	"errors"
	"strconv"
)

// ParseSize parses a systemd byte size as the units use it: a number of
// bytes with an optional K, M, G or T suffix (powers of 1024), or "infinity".
// infinity is returned as the largest uint64, like systemd does.
func ParseSize(s string) (uint64, error) {
	if s == "infinity" {
		return ^uint64(0), nil
	}
	if s == "" {
		return 0, errors.New("not a size: empty (want e.g. 512M, 6G or infinity)")
	}
	mult := uint64(1)
	num := s
	switch s[len(s)-1] {
	case 'K':
		mult = 1 << 10
	case 'M':
		mult = 1 << 20
	case 'G':
		mult = 1 << 30
	case 'T':
		mult = 1 << 40
	}
	if mult != 1 {
		num = s[:len(s)-1]
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n == 0 {
		return 0, errors.New("not a size (want a positive whole number with an optional K, M, G or T suffix, e.g. 6G, or infinity)")
	}
	if n > (^uint64(0))/mult {
		return 0, errors.New("size too large")
	}
	return n * mult, nil
}
