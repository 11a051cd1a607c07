package main

import (
	"math"
	"slices"
	"sort"
)

// Summary summarizes the samples of one measurement, in seconds (or the
// unit of the samples).
type Summary struct {
	N   int     `json:"n"`
	Min float64 `json:"min"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// summarize computes a Summary. Percentiles use the nearest-rank method
// (the smallest sample with at least p% of the samples at or below it), so
// with fewer than 100 samples p99 is the maximum.
func summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Summary{N: len(s), Min: s[0], P50: percentile(s, 50), P99: percentile(s, 99), Max: s[len(s)-1]}
}

// percentile is the nearest-rank p-th percentile of sorted samples.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Latency summarizes per-pod latencies (seconds) with the percentiles an
// SLO is stated in: nearest-rank, like summarize.
type Latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func latency(xs []float64) Latency {
	if len(xs) == 0 {
		return Latency{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Latency{N: len(s), P50: percentile(s, 50), P90: percentile(s, 90), P99: percentile(s, 99), Max: s[len(s)-1]}
}

// byValue returns m's keys, largest value first (ties by key).
func byValue[V int | float64](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// pairOf returns the offloaded and the direct element of xs (the last of
// each mode), nil where there is none.
func pairOf[T any](xs []T, mode func(*T) string) (off, dir *T) {
	for i := range xs {
		switch mode(&xs[i]) {
		case modeOffloaded:
			off = &xs[i]
		case modeDirect:
			dir = &xs[i]
		}
	}
	return off, dir
}
