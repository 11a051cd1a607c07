package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMetrics(t *testing.T) {
	text := `# HELP rest_client_requests_total Number of HTTP requests, partitioned by status code, method, and host.
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 120
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="PUT"} 7
rest_client_requests_total{code="201",host="127.0.0.1:7443",method="POST"} 3
rest_client_requests_total{code="409",host="127.0.0.1:6443",method="PUT"} 1
other_metric{x="a \"quoted\", value\\"} 1.5e+00 1700000000
process_resident_memory_bytes 5.2e+07
`
	got, err := parseMetrics(strings.NewReader(text), requestMetric, "other_metric")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || got[4].Labels["x"] != `a "quoted", value\` || got[4].Value != 1.5 {
		t.Fatalf("parsed %+v", got)
	}
	want := map[hostMethod]float64{
		{"127.0.0.1:6443", "GET"}:  120,
		{"127.0.0.1:6443", "PUT"}:  8,
		{"127.0.0.1:7443", "POST"}: 3,
	}
	if diff := cmp.Diff(want, requestCounts(got)); diff != "" {
		t.Errorf("requestCounts (-want +got):\n%s", diff)
	}
	if _, err := parseMetrics(strings.NewReader(`m{a="x} 1`)); err == nil {
		t.Error("unterminated label value: want an error")
	}
}

func TestIsWrite(t *testing.T) {
	for m, want := range map[string]bool{"GET": false, "WATCH": false, "POST": true, "PUT": true, "PATCH": true, "DELETE": true, "delete": true} {
		if isWrite(m) != want {
			t.Errorf("isWrite(%s) = %v", m, !want)
		}
	}
}
