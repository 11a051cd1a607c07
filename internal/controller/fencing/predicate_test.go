package fencing

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/replicator"
)

// TestFenceChanged: the updates a tenant makes to its RemoteNamespace at
// will (labels, other annotations) queue no fence reconcile; those that
// change what Reconcile reads do.
func TestFenceChanged(t *testing.T) {
	tests := []struct {
		name   string
		change func(*offloadingv1alpha1.RemoteNamespace)
		want   bool
	}{
		{"another annotation", func(rn *offloadingv1alpha1.RemoteNamespace) { rn.Annotations["churn"] = "42" }, false},
		{"a label", func(rn *offloadingv1alpha1.RemoteNamespace) { rn.Labels["churn"] = "42" }, false},
		{"the remotenamespace controller's condition message", func(rn *offloadingv1alpha1.RemoteNamespace) { rn.Status.Message = "x" }, false},
		{"fence asked for", func(rn *offloadingv1alpha1.RemoteNamespace) { rn.Spec.FenceAfterSeconds = ptr.To[int32](20) }, true},
		{"fence no longer asked for", func(rn *offloadingv1alpha1.RemoteNamespace) { rn.Spec.FenceAfterSeconds = nil }, true},
		{"namespace named", func(rn *offloadingv1alpha1.RemoteNamespace) { rn.Spec.RemoteNamespace = "other" }, true},
		{"phase", func(rn *offloadingv1alpha1.RemoteNamespace) {
			rn.Status.Phase = offloadingv1alpha1.RemoteNamespacePending
		}, true},
		{"fence armed", func(rn *offloadingv1alpha1.RemoteNamespace) { rn.Status.FenceAfterSeconds = ptr.To[int32](10) }, true},
		{"no longer a replica", func(rn *offloadingv1alpha1.RemoteNamespace) {
			delete(rn.Annotations, replicator.AnnotationOriginNamespace)
		}, true},
		{"being deleted", func(rn *offloadingv1alpha1.RemoteNamespace) { rn.DeletionTimestamp = ptr.To(metav1.Now()) }, true},
		{"made again under the same name", func(rn *offloadingv1alpha1.RemoteNamespace) { rn.UID = "other" }, true},
	}
	var got, want []string
	p := fenceChanged()
	for _, tt := range tests {
		old := replica(ptr.To[int32](10))
		rn := old.DeepCopy()
		tt.change(rn)
		if p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: rn}) {
			got = append(got, tt.name)
		}
		if tt.want {
			want = append(want, tt.name)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("updates passed (-want +got):\n%s", diff)
	}
}
