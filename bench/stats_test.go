package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSummarize(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i) // 100 … 1
	}
	for _, tc := range []struct {
		name string
		in   []float64
		want Summary
	}{
		{"empty", nil, Summary{}},
		{"one", []float64{2}, Summary{N: 1, Min: 2, P50: 2, P99: 2, Max: 2}},
		{"odd, unsorted", []float64{3, 1, 2}, Summary{N: 3, Min: 1, P50: 2, P99: 3, Max: 3}},
		{"even: lower middle", []float64{4, 1, 3, 2}, Summary{N: 4, Min: 1, P50: 2, P99: 4, Max: 4}},
		{"hundred", hundred, Summary{N: 100, Min: 1, P50: 50, P99: 99, Max: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, summarize(tc.in)); diff != "" {
				t.Errorf("summarize(%v) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}
