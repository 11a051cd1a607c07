package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCountWrites(t *testing.T) {
	log := strings.Join([]string{
		`{"stage":"ResponseComplete","verb":"patch","user":{"username":"system:serviceaccount:annex-system:annex-agent"},"userAgent":"annex-virtual-node","objectRef":{"resource":"pods","subresource":"status","namespace":"ns"},"responseStatus":{"code":200}}`,
		`{"stage":"ResponseComplete","verb":"patch","user":{"username":"system:serviceaccount:annex-system:annex-agent"},"userAgent":"annex-virtual-node","objectRef":{"resource":"pods","subresource":"status","namespace":"ns"},"responseStatus":{"code":200}}`,
		`{"stage":"ResponseComplete","verb":"update","user":{"username":"system:serviceaccount:annex-system:annex-agent"},"userAgent":"annex-virtual-node","objectRef":{"resource":"pods","subresource":"status","namespace":"ns"},"responseStatus":{"code":409}}`,
		`{"stage":"ResponseComplete","verb":"create","user":{"username":"system:serviceaccount:annex-tenant-alpha:annex-consumer"},"userAgent":"annex-agent/v0.0.0 (linux/amd64) kubernetes/$Format","objectRef":{"resource":"shadowpods","namespace":"ns-alpha"},"responseStatus":{"code":201}}`,
		`{"stage":"ResponseComplete","verb":"create","user":{"username":"system:kube-scheduler"},"userAgent":"kube-scheduler/v1.37.2 (linux/amd64) kubernetes/abc/scheduler","objectRef":{"resource":"pods","subresource":"binding","namespace":"ns"},"responseStatus":{"code":201}}`,
		`{"stage":"ResponseComplete","verb":"update","user":{"username":"system:serviceaccount:annex-system:annex-agent"},"userAgent":"annex-agent","objectRef":{"resource":"leases","namespace":"annex-system"},"responseStatus":{"code":200}}`,
		`{"stage":"Panic","verb":"create","user":{"username":"x"},"objectRef":{"resource":"pods","namespace":"ns"}}`,
		`{"stage":"ResponseCompl`, // cut by a write in progress
	}, "\n")
	got, err := countWrites(strings.NewReader(log), "alpha", []string{"ns", "ns-alpha"})
	if err != nil {
		t.Fatal(err)
	}
	want := []WriteCount{
		{Cluster: "alpha", Writer: "annex-virtual-node as annex-system:annex-agent", Verb: "patch", Resource: "pods/status", Count: 2},
		{Cluster: "alpha", Writer: "annex-agent as annex-tenant-alpha:annex-consumer", Verb: "create", Resource: "shadowpods", Count: 1},
		{Cluster: "alpha", Writer: "annex-virtual-node as annex-system:annex-agent", Verb: "update", Resource: "pods/status", Result: "409", Count: 1},
		{Cluster: "alpha", Writer: "kube-scheduler as system:kube-scheduler", Verb: "create", Resource: "pods/binding", Count: 1},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("countWrites (-want +got):\n%s", d)
	}
	if n := annexWritesPerPod(got, 2); n != 2 {
		t.Errorf("annexWritesPerPod = %v, want 2", n)
	}
	if l := writesLine(got, 1); l != "alpha patch pods/status 2.00, alpha create shadowpods 1.00, alpha update pods/status 1.00 (409)" {
		t.Errorf("writesLine = %q", l)
	}
}
