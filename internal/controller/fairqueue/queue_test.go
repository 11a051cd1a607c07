package fairqueue

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// byNamespace is the flow of the tests: the namespace.
func byNamespace(r reconcile.Request) string { return r.Namespace }

func req(ns, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}

func TestQueueOrder(t *testing.T) {
	tests := []struct {
		name string
		// ops: "+ns/name" pushes, "-" pops (the popped item is recorded).
		ops  []string
		want []string
	}{
		{name: "one flow is a FIFO",
			ops:  []string{"+a/1", "+a/2", "+a/3", "-", "-", "-"},
			want: []string{"a/1", "a/2", "a/3"}},
		{name: "flows are served in turn, each in its own order",
			ops:  []string{"+a/1", "+a/2", "+a/3", "+b/1", "+b/2", "+c/1", "-", "-", "-", "-", "-", "-"},
			want: []string{"a/1", "b/1", "c/1", "a/2", "b/2", "a/3"}},
		{name: "a flow that empties leaves the line and joins its back again",
			ops:  []string{"+a/1", "+b/1", "-", "-", "+b/2", "+a/2", "-", "-"},
			want: []string{"a/1", "b/1", "b/2", "a/2"}},
		{name: "a latecomer waits behind one item of each flow with work, not behind a flood",
			ops:  []string{"+a/1", "+a/2", "+a/3", "+a/4", "+a/5", "-", "+b/1", "-", "-"},
			want: []string{"a/1", "a/2", "b/1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New(byNamespace)
			var got []string
			pushed := 0
			for _, op := range tt.ops {
				if op == "-" {
					got = append(got, q.Pop().String())
					continue
				}
				var ns, name string
				if _, err := fmt.Sscanf(op, "+%1s/%s", &ns, &name); err != nil {
					t.Fatalf("op %q: %v", op, err)
				}
				q.Push(req(ns, name))
				pushed++
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("popped (-want +got):\n%s", diff)
			}
			if q.Len() != pushed-len(got) {
				t.Errorf("Len() = %d, want %d", q.Len(), pushed-len(got))
			}
		})
	}
}

// TestTenantServedWhileAnotherFloods drives the controller's queue as
// controller-runtime does (Add, Get, Done): tenant A queues a flood of
// keys, then tenant B one; B's key comes right after the A key whose turn
// it was, where a FIFO would hand it out after every one of A's.
func TestTenantServedWhileAnotherFloods(t *testing.T) {
	tests := []struct {
		name  string
		flood int
		// readdWhileProcessing adds A's first key again while a worker
		// holds it (client-go queues it again once Done).
		readdWhileProcessing bool
		want                 []string
	}{
		{name: "flood of 1000", flood: 1000, want: []string{"a/0", "a/1", "b/x", "a/2"}},
		{name: "flood with a key re-added while processed", flood: 1000, readdWhileProcessing: true, want: []string{"a/0", "a/1", "b/x", "a/2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := NewQueue(byNamespace)("test-"+t.Name(), workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			for i := range tt.flood {
				q.Add(req("a", fmt.Sprint(i)))
			}
			first, _ := q.Get()
			if tt.readdWhileProcessing {
				q.Add(first)
			}
			q.Add(req("b", "x"))
			got := []string{first.String()}
			q.Done(first)
			for range len(tt.want) - 1 {
				item, shutdown := q.Get()
				if shutdown {
					t.Fatal("queue shut down")
				}
				got = append(got, item.String())
				q.Done(item)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("served (-want +got):\n%s", diff)
			}
			wantLen := tt.flood + 1 - len(tt.want)
			if tt.readdWhileProcessing {
				wantLen++
			}
			if q.Len() != wantLen {
				t.Errorf("Len() = %d, want %d", q.Len(), wantLen)
			}
		})
	}
}

func TestTenantOf(t *testing.T) {
	ns := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		ns("shop-alpha", map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelRemoteClusterID: "alpha"}),
		ns("shop", map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelRemoteClusterID: "gamma"}),
		ns("not-managed", map[string]string{corev1alpha1.LabelRemoteClusterID: "alpha"}),
		ns("default", nil),
	).Build()
	tests := []struct {
		req  reconcile.Request
		want string
	}{
		{req("annex-tenant-alpha", "heartbeat"), "alpha"},
		{req("shop-alpha", "web-1"), "alpha"},
		{req("shop", "web-1"), "gamma"},
		{req("not-managed", "x"), ""},
		{req("default", "x"), ""},
		{req("gone", "x"), ""},
		{req("", "cluster-scoped"), ""},
	}
	flowOf := TenantOf(c)
	for _, tt := range tests {
		if got := flowOf(tt.req); got != tt.want {
			t.Errorf("TenantOf(%s) = %q, want %q", tt.req, got, tt.want)
		}
	}
}
