package shadowpod

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// A pod's change is reconciled before ShadowPods queued earlier (a burst's
// creations); an initial list's pods come after them.
func TestPodEventsPriority(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	req := func(name string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}
	}
	pod := func(name, rv string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv,
			Labels: map[string]string{LabelShadowPod: name}}}
	}
	for _, name := range []string{"new-1", "new-2"} {
		q.Add(req(name)) // ShadowPod events: priority 0
	}
	ctx := context.Background()
	var h podEvents
	h.Create(ctx, event.CreateEvent{Object: pod("relisted", "1"), IsInInitialList: true}, q)
	h.Update(ctx, event.UpdateEvent{ObjectOld: pod("started", "1"), ObjectNew: pod("started", "2")}, q)
	h.Delete(ctx, event.DeleteEvent{Object: pod("deleted", "3")}, q)

	var got []string
	for q.Len() > 0 {
		r, _ := q.Get()
		got = append(got, r.Name)
		q.Done(r)
	}
	if diff := cmp.Diff([]string{"started", "deleted", "new-1", "new-2", "relisted"}, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}
