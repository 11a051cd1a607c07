package eventreflector

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corev1listers "k8s.io/client-go/listers/core/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// TestSyncWaitsForThePodInformer: an Event of a pod that the node's pod
// informer has not listed yet is retried, not dropped; once the informer
// has synced, a pod it lacks is gone and its Event is dropped.
func TestSyncWaitsForThePodInformer(t *testing.T) {
	ev := providerEvent(nil)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "p", UID: "local-uid"}, Spec: corev1.PodSpec{NodeName: "annex-beta"}}
	for _, tc := range []struct {
		name      string
		synced    bool
		podListed bool
		wantErr   error
		wantEvent bool
	}{
		{name: "not synced, pod not listed yet: retried", wantErr: errNotKnown},
		{name: "synced, pod gone: dropped", synced: true},
		{name: "synced, pod listed: reflected", synced: true, podListed: true, wantEvent: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			if tc.podListed {
				_ = pods.Add(pod)
			}
			rec := record.NewFakeRecorder(10)
			r := New(Config{
				NodeName: "annex-beta", ProviderID: "beta",
				Pods:       corev1listers.NewPodLister(pods),
				PodsSynced: func() bool { return tc.synced },
				Origin:     func(string, string) (string, bool) { return "local-uid", true },
				Recorder:   rec,
			})
			r.SetNamespaces(map[string]string{"web": "web-alpha"})
			events := cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Event{}, 0, cache.Indexers{})
			_ = events.GetStore().Add(ev)
			r.sess = &session{watches: map[string]*nsWatch{"web-alpha": {informer: events}}}

			err := r.sync("web-alpha/p.1")
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("sync: %v, want %v", err, tc.wantErr)
			}
			if got := len(rec.Events) == 1; got != tc.wantEvent {
				t.Errorf("event recorded = %v, want %v", got, tc.wantEvent)
			}
		})
	}
}

// TestTrimEvent: the cache keeps a reflectable Event without what the
// reflector does not read, and of one that is never reflected only its
// name, which sync then finds nothing to reflect in.
func TestTrimEvent(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *corev1.Event
		want any
	}{
		{name: "reflectable: trimmed", in: providerEvent(func(e *corev1.Event) {
			e.Labels, e.Annotations = map[string]string{"a": "b"}, map[string]string{"c": "d"}
			e.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
			e.Related = &corev1.ObjectReference{Kind: "Node", Name: "n1"}
		}), want: providerEvent(nil)},
		{name: "the provider scheduler's Scheduled: name only", in: providerEvent(func(e *corev1.Event) {
			e.Type, e.Reason, e.ResourceVersion = corev1.EventTypeNormal, ReasonScheduled, "7"
		}), want: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "web-alpha", Name: "p.1", ResourceVersion: "7"}}},
		{name: "about a node: name only", in: providerEvent(func(e *corev1.Event) { e.InvolvedObject.Kind = "Node" }),
			want: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "web-alpha", Name: "p.1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := trimEvent(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("trimEvent (-want +got):\n%s", diff)
			}
			r := New(Config{NodeName: "annex-beta", ProviderID: "beta", Recorder: record.NewFakeRecorder(1)})
			events := cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Event{}, 0, cache.Indexers{})
			_ = events.GetStore().Add(got)
			r.sess = &session{watches: map[string]*nsWatch{"web-alpha": {informer: events}}}
			if _, ok := got.(*metav1.PartialObjectMetadata); ok {
				if ev, err := r.cached("web-alpha/p.1"); ev != nil || err != nil {
					t.Errorf("cached(a trimmed-away Event) = %v, %v; want nil, nil", ev, err)
				}
			}
		})
	}
}

// TestListWatchSkipsScheduled: the provider's Scheduled Events are not
// even received; the API server filters them out of both the list and
// the watch.
func TestListWatchSkipsScheduled(t *testing.T) {
	cs := fake.NewClientset()
	r := New(Config{NodeName: "annex-beta", ProviderID: "beta", RemoteTimeout: time.Second})
	lw := cache.ToListerWatcherWithContext(r.listWatch(cs, "remote"))
	if _, err := lw.ListWithContext(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	var got []string
	for _, a := range cs.Actions() {
		if a, ok := a.(clienttesting.ListAction); ok {
			got = append(got, a.GetVerb()+" "+a.GetListRestrictions().Fields.String())
		}
		if a, ok := a.(clienttesting.WatchAction); ok {
			got = append(got, a.GetVerb()+" "+a.GetWatchRestrictions().Fields.String())
		}
	}
	want := []string{"list reason!=Scheduled", "watch reason!=Scheduled"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}
