package directconn

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Beta's links in the sandbox: gamma's pod CIDR 10.200.0.0/16 overlaps
// alpha's, so beta sees it as 100.64.0.0/16; alpha's is used as it is.
var links = Links{
	"gamma": {Original: netip.MustParsePrefix("10.200.0.0/16"), Remapped: netip.MustParsePrefix("100.64.0.0/16")},
	"alpha": {Original: netip.MustParsePrefix("10.200.0.0/16")},
}

func TestEncodeParse(t *testing.T) {
	in := []Entry{{"gamma", "10.70.0.9", "10.200.3.7"}, {"gamma", "10.70.0.2", "10.200.3.8"}}
	v, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `[{"clusterID":"gamma","address":"10.70.0.2","podAddress":"10.200.3.8"},{"clusterID":"gamma","address":"10.70.0.9","podAddress":"10.200.3.7"}]`; v != want {
		t.Errorf("Encode = %s, want %s", v, want)
	}
	got, err := Parse(v)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Entry{in[1], in[0]}, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if v, err := Encode(nil); v != "" || err != nil {
		t.Errorf("Encode(nil) = %q, %v", v, err)
	}
	big := make([]Entry, 5000)
	for i := range big {
		big[i] = Entry{ClusterID: strings.Repeat("g", 50), Address: "10.70.0.1", PodAddress: "10.200.0.1"}
	}
	if _, err := Encode(big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Encode(5000 entries) error = %v, want ErrTooLarge", err)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, v := range []string{
		``, `{}`, `[1]`, `[{"clusterID":"g","address":"a","podAddress":"p","extra":1}]`,
		`[] []`, `[{"clusterID":"g"}] x`, `[{"clusterID":3}]`, strings.Repeat(" ", MaxSize+1) + `[]`,
	} {
		if _, err := Parse(v); err == nil {
			t.Errorf("Parse(%.40q) succeeded", v)
		}
	}
	for _, v := range []string{`[]`, `null`, ` [ ] `} {
		if _, err := Parse(v); err != nil {
			t.Errorf("Parse(%q): %v", v, err)
		}
	}
}

func TestResolve(t *testing.T) {
	slice := map[string]bool{"10.70.0.9": true, "10.70.0.2": true, "10.70.0.5": true, "10.200.1.1": true}
	tests := []struct {
		name         string
		entries      []Entry
		want         map[string]string
		wantProblems int
	}{
		{"remapped link", []Entry{{"gamma", "10.70.0.9", "10.200.3.7"}}, map[string]string{"10.70.0.9": "100.64.3.7"}, 0},
		{"link as it is", []Entry{{"alpha", "10.70.0.9", "10.200.3.7"}}, map[string]string{"10.70.0.9": "10.200.3.7"}, 0},
		{"no link", []Entry{{"delta", "10.70.0.9", "10.200.3.7"}}, map[string]string{}, 1},
		{"address not in the slice", []Entry{{"gamma", "8.8.8.8", "10.200.3.7"}}, map[string]string{}, 1},
		{"pod address outside the pod CIDR", []Entry{{"gamma", "10.70.0.9", "10.96.0.1"}}, map[string]string{}, 1},
		{"pod address not an IP", []Entry{{"gamma", "10.70.0.9", "kubernetes.default"}}, map[string]string{}, 1},
		{"pod address with a zone", []Entry{{"gamma", "10.70.0.9", "fe80::1%eth0"}}, map[string]string{}, 1},
		{"duplicate address", []Entry{{"gamma", "10.70.0.9", "10.200.3.7"}, {"gamma", "10.70.0.9", "10.200.3.8"}}, map[string]string{}, 2},
		{"duplicate pod address", []Entry{{"gamma", "10.70.0.9", "10.200.3.7"}, {"gamma", "10.70.0.2", "10.200.3.7"}}, map[string]string{}, 2},
		{"good and bad", []Entry{{"gamma", "10.70.0.9", "10.200.3.7"}, {"gamma", "10.70.0.2", "1.2.3.4"}},
			map[string]string{"10.70.0.9": "100.64.3.7"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := Resolve(tc.entries, slice, links)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("rewrites (-want +got):\n%s", diff)
			}
			if len(problems) != tc.wantProblems {
				t.Errorf("problems = %q, want %d", problems, tc.wantProblems)
			}
		})
	}
}

func TestSummary(t *testing.T) {
	p := []string{"a", "b", "c", "d", "e", "f", "g"}
	if got, want := Summary(p), "a; b; c; d; e; and 2 more"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
}

// FuzzParseResolve: whatever a tenant writes, Parse and Resolve never panic,
// and every rewrite is of an address of the slice to an address inside the
// provider's view of the linked cluster's pod CIDR.
func FuzzParseResolve(f *testing.F) {
	f.Add(`[{"clusterID":"gamma","address":"10.70.0.9","podAddress":"10.200.3.7"}]`)
	f.Add(`[{"clusterID":"alpha","address":"10.200.1.1","podAddress":"10.200.255.255"},{"clusterID":"gamma","address":"10.70.0.2","podAddress":"::1"}]`)
	f.Add(`[{"clusterID":"gamma","address":"10.70.0.9","podAddress":"10.200.3.7"},{"clusterID":"gamma","address":"10.70.0.9","podAddress":"10.200.3.7"}]`)
	f.Add(`null`)
	f.Add(`[{"clusterID":"","address":"","podAddress":""}]`)
	slice := map[string]bool{"10.70.0.9": true, "10.70.0.2": true, "10.200.1.1": true}
	views := map[string]netip.Prefix{}
	for id, m := range links {
		views[id] = m.View()
	}
	f.Fuzz(func(t *testing.T, value string) {
		entries, err := Parse(value)
		if err != nil {
			return
		}
		rewrites, _ := Resolve(entries, slice, links)
		for from, to := range rewrites {
			if !slice[from] {
				t.Fatalf("rewrote %q, not an address of the slice", from)
			}
			addr, err := netip.ParseAddr(to)
			if err != nil {
				t.Fatalf("rewrote %q to %q, not an address", from, to)
			}
			inside := false
			for _, v := range views {
				inside = inside || v.Contains(addr)
			}
			if !inside {
				t.Fatalf("rewrote %q to %s, outside every linked pod CIDR", from, addr)
			}
		}
	})
}
