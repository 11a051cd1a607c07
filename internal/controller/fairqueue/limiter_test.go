package fairqueue

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestLimiterWait(t *testing.T) {
	type step struct {
		advance time.Duration // the clock moves on first
		tenant  string
		key     string
	}
	key := func(s step) types.NamespacedName {
		return types.NamespacedName{Namespace: s.tenant + "-ns", Name: s.key}
	}
	tests := []struct {
		name  string
		opts  LimiterOptions
		steps []step
		want  []time.Duration
	}{
		{
			name:  "the burst goes at once, then one turn every 1/rate",
			opts:  LimiterOptions{Rate: 10, Burst: 2},
			steps: []step{{0, "a", "1"}, {0, "a", "2"}, {0, "a", "3"}, {0, "a", "4"}},
			want:  []time.Duration{0, 0, 100 * time.Millisecond, 200 * time.Millisecond},
		},
		{
			name: "a key asking again before its turn gets the rest of its wait and takes no other token",
			opts: LimiterOptions{Rate: 10, Burst: 1},
			steps: []step{{0, "a", "1"}, {0, "a", "2"}, {40 * time.Millisecond, "a", "2"}, {0, "a", "2"},
				{60 * time.Millisecond, "a", "2"}, {0, "a", "3"}},
			want: []time.Duration{0, 100 * time.Millisecond, 60 * time.Millisecond, 60 * time.Millisecond,
				0, 100 * time.Millisecond},
		},
		{
			name: "tenant B is not held up while tenant A floods",
			opts: LimiterOptions{Rate: 10, Burst: 1},
			steps: []step{{0, "a", "1"}, {0, "a", "2"}, {0, "a", "3"}, {0, "a", "4"}, {0, "b", "1"},
				{0, "a", "5"}, {0, "b", "2"}},
			want: []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 0,
				400 * time.Millisecond, 100 * time.Millisecond},
		},
		{
			name:  "a quiet tenant earns its burst back, never more",
			opts:  LimiterOptions{Rate: 10, Burst: 2},
			steps: []step{{0, "a", "1"}, {0, "a", "2"}, {time.Hour, "a", "3"}, {0, "a", "4"}, {0, "a", "5"}},
			want:  []time.Duration{0, 0, 0, 0, 100 * time.Millisecond},
		},
		{
			name:  "rate 0: no bound",
			opts:  LimiterOptions{Rate: 0, Burst: 1},
			steps: []step{{0, "a", "1"}, {0, "a", "2"}, {0, "a", "3"}},
			want:  []time.Duration{0, 0, 0},
		},
		{
			name:  "the provider's own objects (tenant \"\") never wait",
			opts:  LimiterOptions{Rate: 1, Burst: 1},
			steps: []step{{0, "", "1"}, {0, "", "2"}, {0, "", "3"}},
			want:  []time.Duration{0, 0, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC))
			l := NewLimiter(tt.opts, clk)
			var got []time.Duration
			for _, s := range tt.steps {
				clk.SetTime(clk.Now().Add(s.advance))
				got = append(got, l.Wait(s.tenant, key(s)))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("waits (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLimiterForgets checks that turns never taken and idle tenants are
// forgotten, so the Limiter holds no more than its busy tenants' turns.
func TestLimiterForgets(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC))
	l := NewLimiter(LimiterOptions{Rate: 10, Burst: 1}, clk)
	for _, k := range []string{"1", "2", "3"} {
		l.Wait("a", types.NamespacedName{Namespace: "ns", Name: k})
	}
	l.Wait("b", types.NamespacedName{Namespace: "ns", Name: "1"})
	if got := len(l.tenants["a"].due); got != 2 {
		t.Fatalf("tenant a holds %d turns, want 2", got)
	}
	clk.SetTime(clk.Now().Add(3 * staleAfter))
	if got := l.Wait("c", types.NamespacedName{Namespace: "ns", Name: "1"}); got != 0 {
		t.Errorf("tenant c waits %s, want 0", got)
	}
	if diff := cmp.Diff([]string{"c"}, tenantNames(l)); diff != "" {
		t.Errorf("tenants kept (-want +got):\n%s", diff)
	}
}

func tenantNames(l *Limiter) []string {
	var out []string
	for name := range l.tenants {
		out = append(out, name)
	}
	return out
}

func TestLimiterOptionsValidate(t *testing.T) {
	tests := []struct {
		opts    LimiterOptions
		wantErr bool
	}{
		{DefaultLimiterOptions(), false},
		{LimiterOptions{Rate: 0, Burst: 0}, false},
		{LimiterOptions{Rate: -1, Burst: 10}, true},
		{LimiterOptions{Rate: 5, Burst: 0}, true},
	}
	for _, tt := range tests {
		if err := tt.opts.Validate(); (err != nil) != tt.wantErr {
			t.Errorf("Validate(%+v) = %v, want error %v", tt.opts, err, tt.wantErr)
		}
	}
}
