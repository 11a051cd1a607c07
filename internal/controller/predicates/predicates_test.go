package predicates

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func TestSpecChanged(t *testing.T) {
	obj := func(uid types.UID, gen int64, label string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", UID: uid, Generation: gen, Labels: map[string]string{"l": label}}}
	}
	type result struct{ Create, Update, Delete, Generic bool }
	for _, tc := range []struct {
		name     string
		old, new *corev1.ConfigMap
		want     result
	}{
		{name: "metadata only", old: obj("a", 1, "x"), new: obj("a", 1, "y"), want: result{true, false, true, true}},
		{name: "spec changed", old: obj("a", 1, "x"), new: obj("a", 2, "x"), want: result{true, true, true, true}},
		{name: "made again under the same name, same generation", old: obj("a", 1, "x"), new: obj("b", 1, "x"), want: result{true, true, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := SpecChanged()
			got := result{
				Create:  p.Create(event.CreateEvent{Object: tc.new}),
				Update:  p.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}),
				Delete:  p.Delete(event.DeleteEvent{Object: tc.new}),
				Generic: p.Generic(event.GenericEvent{Object: tc.new}),
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestAnnotationChanged(t *testing.T) {
	obj := func(gen int64, annotations map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Generation: gen, Annotations: annotations}}
	}
	const key = "annex.dev/watched"
	type result struct{ Create, Update, Delete, Generic bool }
	for _, tc := range []struct {
		name     string
		old, new *corev1.ConfigMap
		want     result
	}{
		{name: "another annotation changed", old: obj(1, map[string]string{key: "v", "other": "1"}), new: obj(1, map[string]string{key: "v", "other": "2"}),
			want: result{true, false, true, true}},
		{name: "the annotation changed", old: obj(1, map[string]string{key: "v"}), new: obj(1, map[string]string{key: "w"}), want: result{true, true, true, true}},
		{name: "the annotation set", old: obj(1, nil), new: obj(1, map[string]string{key: ""}), want: result{true, true, true, true}},
		{name: "the annotation removed", old: obj(1, map[string]string{key: ""}), new: obj(1, nil), want: result{true, true, true, true}},
		{name: "spec only (for SpecChanged)", old: obj(1, nil), new: obj(2, nil), want: result{true, false, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := AnnotationChanged(key)
			got := result{
				Create:  p.Create(event.CreateEvent{Object: tc.new}),
				Update:  p.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}),
				Delete:  p.Delete(event.DeleteEvent{Object: tc.new}),
				Generic: p.Generic(event.GenericEvent{Object: tc.new}),
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
