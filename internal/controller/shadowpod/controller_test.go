package shadowpod

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/fairqueue"
	"github.com/annexhq/annex/internal/controller/replicator"
	"github.com/annexhq/annex/internal/podstatus"
)

var now = metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, corev1alpha1.AddToScheme, offloadingv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// remoteNS is a namespace of consumer; "" gives an unmanaged namespace.
func remoteNS(name, consumer string) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if consumer != "" {
		ns.Labels = map[string]string{corev1alpha1.LabelRemoteClusterID: consumer, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}
	}
	return ns
}

// slice is a ResourceSlice replica of consumer in its tenant namespace.
func slice(t *testing.T, name, consumer string, phase corev1alpha1.ResourceSlicePhase, granted string, mutate ...func(*corev1alpha1.ResourceSlice)) *corev1alpha1.ResourceSlice {
	rs := &corev1alpha1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: corev1alpha1.TenantNamespaceName(consumer), Name: name,
			Annotations: map[string]string{replicator.AnnotationOriginNamespace: "annex-tenant-beta"},
		},
		Spec:   corev1alpha1.ResourceSliceSpec{ConsumerClusterID: consumer, ProviderClusterID: "beta", Resources: rl(t, granted)},
		Status: corev1alpha1.ResourceSliceStatus{Phase: phase},
	}
	if phase == corev1alpha1.ResourceSliceAccepted {
		rs.Status.Resources = rl(t, granted)
	}
	for _, m := range mutate {
		m(rs)
	}
	return rs
}

func shadowPod(t *testing.T, ns, name, requests string, mutate ...func(*offloadingv1alpha1.ShadowPod)) *offloadingv1alpha1.ShadowPod {
	sp := &offloadingv1alpha1.ShadowPod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name), Generation: 1},
		Spec: offloadingv1alpha1.ShadowPodSpec{
			Pod: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "app", Image: "nginx", Resources: corev1.ResourceRequirements{Requests: rl(t, requests)},
			}}},
			PodLabels:      map[string]string{"app": "web"},
			PodAnnotations: map[string]string{"note": "offloaded"},
		},
	}
	for _, m := range mutate {
		m(sp)
	}
	return sp
}

// podOf is the pod the controller creates for sp.
func podOf(sp *offloadingv1alpha1.ShadowPod, mutate ...func(*corev1.Pod)) *corev1.Pod {
	labels := map[string]string{offloadingv1alpha1.LabelShadowPod: sp.Name}
	for k, v := range sp.Spec.PodLabels {
		labels[k] = v
	}
	var annotations map[string]string
	if len(sp.Spec.PodAnnotations) > 0 {
		annotations = map[string]string{}
		for k, v := range sp.Spec.PodAnnotations {
			annotations[k] = v
		}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: sp.Namespace, Name: sp.Name, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: offloadingv1alpha1.GroupVersion.String(), Kind: "ShadowPod", Name: sp.Name, UID: sp.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: *sp.Spec.Pod.DeepCopy(),
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func running(p *corev1.Pod) {
	p.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: "10.1.0.7", PodIPs: []corev1.PodIP{{IP: "10.1.0.7"}}, StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, RestartCount: 2, Image: "nginx",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}},
	}
}

// scheduled is a pod bound to a node whose container is being created.
func scheduled(p *corev1.Pod) {
	p.Status = corev1.PodStatus{
		Phase:      corev1.PodPending,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "nginx",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}},
	}
}

func withStatus(phase corev1.PodPhase, reason, msg string) func(*offloadingv1alpha1.ShadowPod) {
	return func(sp *offloadingv1alpha1.ShadowPod) {
		sp.Status = offloadingv1alpha1.ShadowPodStatus{Phase: phase, Reason: reason, Message: msg}
	}
}

// succeeded is a pod whose container exited 0.
func succeeded(p *corev1.Pod) {
	p.Status = corev1.PodStatus{
		Phase: corev1.PodSucceeded, PodIP: "10.1.0.7", PodIPs: []corev1.PodIP{{IP: "10.1.0.7"}}, StartTime: &now,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "nginx",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}},
	}
}

const (
	ns           = "web-alpha"
	quotaRe      = "spec.pod: the requests of its containers would take consumer alpha over the resources granted by its accepted ResourceSlices: "
	notGrantedRe = "spec.pod: its containers request resources that no accepted ResourceSlice of consumer alpha grants and that this provider does not leave unmetered: "
)

func TestReconcile(t *testing.T) {
	s := testScheme(t)
	base := []client.Object{
		remoteNS("annex-tenant-alpha", "alpha"), remoteNS(ns, "alpha"), remoteNS("shop-alpha", "alpha"), remoteNS("web-gamma", "gamma"),
		slice(t, "peering", "alpha", corev1alpha1.ResourceSliceAccepted, "cpu=4,memory=8Gi,pods=10"),
	}
	web := shadowPod(t, ns, "web", "cpu=1,memory=1Gi")
	hostNet := shadowPod(t, ns, "web", "cpu=1", func(sp *offloadingv1alpha1.ShadowPod) { sp.Spec.Pod.HostNetwork = true })
	big := shadowPod(t, ns, "web", "cpu=2")
	other := func(namespace, name, requests string, mutate ...func(*offloadingv1alpha1.ShadowPod)) []client.Object {
		o := shadowPod(t, namespace, name, requests, mutate...)
		return []client.Object{o, podOf(o, running)}
	}
	done := shadowPod(t, ns, "done", "cpu=3", withStatus(corev1.PodSucceeded, "", ""))
	const hostNetMsg = "spec.pod.hostNetwork: Forbidden: sharing the node's network namespace: " + hint

	tests := []struct {
		name        string
		objs        []client.Object
		sp          *offloadingv1alpha1.ShadowPod
		opts        Options
		want        offloadingv1alpha1.ShadowPodStatus
		wantPod     *corev1.Pod // nil: there must be no pod
		wantEvents  []string
		wantRequeue bool
	}{
		{
			name:    "pod created",
			objs:    base,
			sp:      web,
			wantPod: podOf(web),
		},
		{
			name:    "a running pod's status is not mirrored: the consumer reads the pod",
			objs:    append(append([]client.Object{}, base...), podOf(web, running)),
			sp:      web,
			want:    offloadingv1alpha1.ShadowPodStatus{},
			wantPod: podOf(web, running),
		},
		{
			name:    "a finished pod's final state is recorded",
			objs:    append(append([]client.Object{}, base...), podOf(web, succeeded)),
			sp:      web,
			want:    podstatus.FromPod(podOf(web, succeeded)),
			wantPod: podOf(web, succeeded),
		},
		{
			name: "the status of a retried creation is cleared once the pod exists",
			objs: append(append([]client.Object{}, base...), podOf(web, scheduled)),
			sp: shadowPod(t, ns, "web", "cpu=1,memory=1Gi", withStatus(corev1.PodPending, offloadingv1alpha1.ReasonCreationFailed,
				"cannot create the pod yet, retrying")),
			want:    offloadingv1alpha1.ShadowPodStatus{},
			wantPod: podOf(web, scheduled),
		},
		{
			name: "labels and annotations added, others kept",
			objs: append(append([]client.Object{}, base...), podOf(web, running, func(p *corev1.Pod) {
				p.Labels = map[string]string{offloadingv1alpha1.LabelShadowPod: "web", "app": "old"}
				p.Annotations = map[string]string{"cni.example/ip": "10.1.0.7"}
			})),
			sp: web,
			wantPod: podOf(web, running, func(p *corev1.Pod) {
				p.Annotations = map[string]string{"cni.example/ip": "10.1.0.7", "note": "offloaded"}
			}),
		},
		{
			name: "deleted pod re-created",
			objs: base,
			sp:   shadowPod(t, ns, "web", "cpu=1", withStatus(corev1.PodRunning, "", "")),
			// The new pod's status is mirrored (empty: the fake client does
			// not default the phase to Pending as an API server does).
			want:    offloadingv1alpha1.ShadowPodStatus{},
			wantPod: podOf(shadowPod(t, ns, "web", "cpu=1")),
		},
		{
			name: "a succeeded pod is never re-created",
			objs: base,
			sp:   shadowPod(t, ns, "web", "cpu=1", withStatus(corev1.PodSucceeded, "", "")),
			want: offloadingv1alpha1.ShadowPodStatus{Phase: corev1.PodSucceeded},
		},
		{
			name: "a pod killed by its deletion is not mirrored as failed",
			objs: append(append([]client.Object{}, base...), podOf(web, running, func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodFailed
				p.DeletionTimestamp = &now
				p.Finalizers = []string{"test/hold"}
			})),
			sp:   shadowPod(t, ns, "web", "cpu=1,memory=1Gi", withStatus(corev1.PodRunning, "", "")),
			want: offloadingv1alpha1.ShadowPodStatus{Phase: corev1.PodRunning},
			wantPod: podOf(web, running, func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodFailed
				p.DeletionTimestamp = &now
				p.Finalizers = []string{"test/hold"}
			}),
		},
		{
			name:       "refused: hostNetwork",
			objs:       base,
			sp:         hostNet,
			want:       offloadingv1alpha1.ShadowPodStatus{Phase: corev1.PodFailed, Reason: offloadingv1alpha1.ReasonForbidden, Message: hostNetMsg},
			wantEvents: []string{"Warning Forbidden " + hostNetMsg},
		},
		{
			name:    "hostNetwork with --allow-privileged-shadowpods",
			objs:    base,
			sp:      hostNet,
			opts:    Options{AllowPrivileged: true},
			wantPod: podOf(hostNet),
		},
		{
			name: "refused: quota, counting the consumer's pods in all its namespaces",
			objs: join(base, other(ns, "a", "cpu=1"), other("shop-alpha", "b", "cpu=1500m")),
			sp:   big,
			want: offloadingv1alpha1.ShadowPodStatus{Phase: corev1.PodFailed, Reason: offloadingv1alpha1.ReasonQuotaExceeded,
				Message: quotaRe + "cpu 2 requested + 2500m in use exceeds 4 granted"},
			wantEvents: []string{"Warning QuotaExceeded " + quotaRe + "cpu 2 requested + 2500m in use exceeds 4 granted"},
		},
		{
			name: "quota: finished pods, ShadowPods without a pod and other consumers' pods do not count",
			objs: join(base,
				[]client.Object{done, podOf(done, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })},
				other("web-gamma", "theirs", "cpu=4"),
				[]client.Object{
					shadowPod(t, ns, "refused", "cpu=4", withStatus(corev1.PodFailed, offloadingv1alpha1.ReasonForbidden, "no")),
					shadowPod(t, ns, "waiting", "cpu=4"),
				}),
			sp:      big,
			wantPod: podOf(big),
		},
		{
			name: "quota: slices not accepted, not replicas or of another consumer do not count",
			objs: []client.Object{
				remoteNS(ns, "alpha"),
				slice(t, "denied", "alpha", corev1alpha1.ResourceSliceDenied, "cpu=100,memory=100Gi,pods=100"),
				slice(t, "mine", "alpha", corev1alpha1.ResourceSliceAccepted, "cpu=100,memory=100Gi,pods=100", func(rs *corev1alpha1.ResourceSlice) {
					rs.Annotations = nil
				}),
				slice(t, "spoofed", "alpha", corev1alpha1.ResourceSliceAccepted, "cpu=100,memory=100Gi,pods=100", func(rs *corev1alpha1.ResourceSlice) {
					rs.Spec.ConsumerClusterID = "gamma"
				}),
			},
			sp: web,
			want: offloadingv1alpha1.ShadowPodStatus{Phase: corev1.PodFailed, Reason: offloadingv1alpha1.ReasonQuotaExceeded,
				Message: "consumer alpha has no accepted ResourceSlice on this provider: no pod of it may run here"},
			wantEvents: []string{"Warning QuotaExceeded consumer alpha has no accepted ResourceSlice on this provider: no pod of it may run here"},
		},
		{
			name: "refused: quota, counting a pod that no ShadowPod controls any more (orphaned)",
			objs: join(base, []client.Object{podOf(shadowPod(t, "shop-alpha", "left", "cpu=3"), running, func(p *corev1.Pod) {
				p.OwnerReferences = nil
			})}),
			sp: big,
			want: offloadingv1alpha1.ShadowPodStatus{Phase: corev1.PodFailed, Reason: offloadingv1alpha1.ReasonQuotaExceeded,
				Message: quotaRe + "cpu 2 requested + 3 in use exceeds 4 granted"},
			wantEvents: []string{"Warning QuotaExceeded " + quotaRe + "cpu 2 requested + 3 in use exceeds 4 granted"},
		},
		{
			name: "a pod being deleted still counts: the ShadowPod waits for it, and is not refused",
			objs: join(base, []client.Object{podOf(shadowPod(t, "shop-alpha", "going", "cpu=3"), running, func(p *corev1.Pod) {
				p.DeletionTimestamp = &now
				p.Finalizers = []string{"test/hold"}
			})}),
			sp:          big,
			wantRequeue: true,
		},
		{
			name: "refused: a GPU the grant does not name",
			objs: base,
			sp:   shadowPod(t, ns, "web", "cpu=1,nvidia.com/gpu=1"),
			want: offloadingv1alpha1.ShadowPodStatus{Phase: corev1.PodFailed, Reason: offloadingv1alpha1.ReasonQuotaExceeded,
				Message: notGrantedRe + "nvidia.com/gpu 1 requested"},
			wantEvents: []string{"Warning QuotaExceeded " + notGrantedRe + "nvidia.com/gpu 1 requested"},
		},
		{
			name: "refused: ephemeral-storage and hugepages the grant does not name, limits only",
			objs: base,
			sp: shadowPod(t, ns, "web", "cpu=1", func(sp *offloadingv1alpha1.ShadowPod) {
				sp.Spec.Pod.Containers[0].Resources.Limits = rl(t, "ephemeral-storage=100Gi,hugepages-2Mi=1Gi")
			}),
			want: offloadingv1alpha1.ShadowPodStatus{Phase: corev1.PodFailed, Reason: offloadingv1alpha1.ReasonQuotaExceeded,
				Message: notGrantedRe + "ephemeral-storage 100Gi requested, hugepages-2Mi 1Gi requested"},
			wantEvents: []string{"Warning QuotaExceeded " + notGrantedRe + "ephemeral-storage 100Gi requested, hugepages-2Mi 1Gi requested"},
		},
		{
			name:    "ephemeral-storage left unmetered by the provider",
			objs:    base,
			sp:      shadowPod(t, ns, "web", "cpu=1,ephemeral-storage=1Gi"),
			opts:    Options{UnmeteredResources: []corev1.ResourceName{corev1.ResourceEphemeralStorage}},
			wantPod: podOf(shadowPod(t, ns, "web", "cpu=1,ephemeral-storage=1Gi")),
		},
		{
			name:    "a granted GPU",
			objs:    []client.Object{remoteNS(ns, "alpha"), slice(t, "peering", "alpha", corev1alpha1.ResourceSliceAccepted, "cpu=4,memory=8Gi,pods=10,nvidia.com/gpu=1")},
			sp:      shadowPod(t, ns, "web", "cpu=1,nvidia.com/gpu=1"),
			wantPod: podOf(shadowPod(t, ns, "web", "cpu=1,nvidia.com/gpu=1")),
		},
		{
			name:    "a BestEffort pod gets the default requests",
			objs:    base,
			sp:      shadowPod(t, ns, "web", ""),
			opts:    Options{DefaultRequests: rl(t, "cpu=100m,memory=128Mi")},
			wantPod: podOf(shadowPod(t, ns, "web", "cpu=100m,memory=128Mi")),
		},
		{
			name: "refused: a BestEffort pod is counted with the default requests",
			objs: join(base, other(ns, "a", "cpu=3950m")),
			sp:   shadowPod(t, ns, "web", ""),
			opts: Options{DefaultRequests: rl(t, "cpu=100m,memory=128Mi")},
			want: offloadingv1alpha1.ShadowPodStatus{Phase: corev1.PodFailed, Reason: offloadingv1alpha1.ReasonQuotaExceeded,
				Message: quotaRe + "cpu 100m requested + 3950m in use exceeds 4 granted"},
			wantEvents: []string{"Warning QuotaExceeded " + quotaRe + "cpu 100m requested + 3950m in use exceeds 4 granted"},
		},
		{
			name: "a namespace not managed for a consumer is ignored",
			objs: []client.Object{remoteNS("default", "")},
			sp:   shadowPod(t, "default", "web", "cpu=1"),
		},
		{
			name: "refused: a foreign pod of the same name",
			objs: append(append([]client.Object{}, base...), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}),
			sp:   web,
			want: offloadingv1alpha1.ShadowPodStatus{Phase: corev1.PodFailed, Reason: offloadingv1alpha1.ReasonCreationFailed,
				Message: "pod web already exists on this provider and does not belong to this ShadowPod"},
			wantPod:    &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}},
			wantEvents: []string{"Warning CreationFailed pod web already exists on this provider and does not belong to this ShadowPod"},
		},
		{
			name: "the pod of a previous ShadowPod of the same name is waited for",
			objs: append(append([]client.Object{}, base...), podOf(shadowPod(t, ns, "web", "cpu=1", func(sp *offloadingv1alpha1.ShadowPod) {
				sp.UID = "previous"
			}))),
			sp: web,
			wantPod: podOf(shadowPod(t, ns, "web", "cpu=1", func(sp *offloadingv1alpha1.ShadowPod) {
				sp.UID = "previous"
			})),
			wantRequeue: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := fake.NewClientBuilder().WithScheme(s).
				WithStatusSubresource(&offloadingv1alpha1.ShadowPod{}).
				WithObjects(append(append([]client.Object{}, tc.objs...), tc.sp.DeepCopy())...).Build()
			rec := events.NewFakeRecorder(10)
			r := New(c, rec, tc.opts)
			req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tc.sp)}

			// Twice: the second pass must change nothing and record no Event.
			for range 2 {
				res, err := r.Reconcile(ctx, req)
				if err != nil {
					t.Fatalf("Reconcile() error = %v", err)
				}
				if got := res.RequeueAfter > 0; got != tc.wantRequeue {
					t.Errorf("Reconcile() = %+v, want requeue %v", res, tc.wantRequeue)
				}
			}

			got := &offloadingv1alpha1.ShadowPod{}
			if err := c.Get(ctx, req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Status); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			pod := &corev1.Pod{}
			if err := c.Get(ctx, req.NamespacedName, pod); err != nil {
				if !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
				pod = nil
			}
			if diff := cmp.Diff(tc.wantPod, pod, cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion"),
				cmpopts.IgnoreTypes(metav1.TypeMeta{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("pod (-want +got):\n%s", diff)
			}
			close(rec.Events)
			var gotEvents []string
			for e := range rec.Events {
				gotEvents = append(gotEvents, e)
			}
			if diff := cmp.Diff(tc.wantEvents, gotEvents); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// join concatenates object lists into a new one.
func join(lists ...[]client.Object) []client.Object {
	var out []client.Object
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// TestQuotaCountsPodsNotYetInCache admits two ShadowPods back to back while
// the cache does not show the first one's pod yet: the second must still be
// counted against the quota.
func TestQuotaCountsPodsNotYetInCache(t *testing.T) {
	ctx := context.Background()
	first, second := shadowPod(t, ns, "first", "cpu=3"), shadowPod(t, ns, "second", "cpu=2")
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).
		WithStatusSubresource(&offloadingv1alpha1.ShadowPod{}).
		WithObjects(remoteNS(ns, "alpha"), slice(t, "peering", "alpha", corev1alpha1.ResourceSliceAccepted, "cpu=4,memory=8Gi,pods=10"), first, second).
		WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*corev1.PodList); ok {
				return nil // a cache that has not seen any pod yet
			}
			return c.List(ctx, list, opts...)
		}}).Build()
	r := New(c, events.NewFakeRecorder(10), Options{})
	for _, sp := range []*offloadingv1alpha1.ShadowPod{first, second} {
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(sp)}); err != nil {
			t.Fatalf("Reconcile(%s) error = %v", sp.Name, err)
		}
	}
	got := &offloadingv1alpha1.ShadowPod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(second), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Reason != offloadingv1alpha1.ReasonQuotaExceeded {
		t.Errorf("second ShadowPod status = %+v, want refused with %s", got.Status, offloadingv1alpha1.ReasonQuotaExceeded)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(second), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("second pod: err = %v, want NotFound", err)
	}

	// Once the first ShadowPod is gone, its admission no longer counts.
	if err := c.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(first)}); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.admitted[client.ObjectKeyFromObject(first)]; ok {
		t.Errorf("first ShadowPod still counted after its deletion")
	}
}

// While a pod's creation is in flight its ShadowPod counts against the
// quota; a ShadowPod that does not fit then is retried, not refused, since
// the creation may fail and free its room.
func TestQuotaReservationInFlight(t *testing.T) {
	ctx := context.Background()
	first, second := shadowPod(t, ns, "first", "cpu=3"), shadowPod(t, ns, "second", "cpu=2")
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).
		WithObjects(remoteNS(ns, "alpha"), slice(t, "peering", "alpha", corev1alpha1.ResourceSliceAccepted, "cpu=4,memory=8Gi,pods=10"), first, second).
		Build()
	r := New(c, events.NewFakeRecorder(10), Options{})
	reserve := func(sp *offloadingv1alpha1.ShadowPod) (string, time.Duration, error) {
		return r.reserve(ctx, sp, "alpha", PodRequests(&sp.Spec.Pod))
	}
	if msg, retry, err := reserve(first); msg != "" || retry != 0 || err != nil {
		t.Fatalf("reserve(first) = %q, %v, %v; want it to fit", msg, retry, err)
	}
	msg, retry, err := reserve(second)
	if msg == "" || retry != admissionRetry || err != nil {
		t.Fatalf("reserve(second) while first is in flight = %q, %v, %v; want a retry", msg, retry, err)
	}
	r.settle(client.ObjectKeyFromObject(first), "alpha", nil) // the first creation failed
	if msg, retry, err := reserve(second); msg != "" || retry != 0 || err != nil {
		t.Fatalf("reserve(second) after the first failed = %q, %v, %v; want it to fit", msg, retry, err)
	}
	pod, _, err := r.desiredPod(second)
	if err != nil {
		t.Fatal(err)
	}
	r.settle(client.ObjectKeyFromObject(second), "alpha", pod)
	// Nothing in flight any more: a pod that does not fit is refused.
	third := shadowPod(t, ns, "third", "cpu=3")
	if msg, retry, err := reserve(third); msg == "" || retry != 0 || err != nil {
		t.Fatalf("reserve(third) = %q, %v, %v; want a refusal", msg, retry, err)
	}
	// A request that exceeds the grant by itself is refused at once.
	huge := shadowPod(t, ns, "huge", "cpu=5")
	if msg, retry, err := reserve(huge); msg == "" || retry != 0 || err != nil {
		t.Fatalf("reserve(huge) = %q, %v, %v; want a refusal", msg, retry, err)
	}
}

// A ShadowPod that fits under the consumer's usage bound is admitted
// without counting every pod again; one that does not is counted exactly
// (and refused only then). A pod stored with other requests than admitted
// drops the bound.
func TestQuotaUsageBound(t *testing.T) {
	ctx := context.Background()
	var lists atomic.Int32
	sps := []*offloadingv1alpha1.ShadowPod{}
	objs := []client.Object{remoteNS(ns, "alpha"), slice(t, "peering", "alpha", corev1alpha1.ResourceSliceAccepted, "cpu=4,memory=8Gi,pods=10")}
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		sp := shadowPod(t, ns, name, "cpu=1")
		sps = append(sps, sp)
		objs = append(objs, sp)
	}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).
		WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*corev1.PodList); ok {
				lists.Add(1)
			}
			return c.List(ctx, list, opts...)
		}}).Build()
	r := New(c, events.NewFakeRecorder(10), Options{})
	for _, sp := range sps[:4] {
		if msg, retry, err := r.reserve(ctx, sp, "alpha", PodRequests(&sp.Spec.Pod)); msg != "" || retry != 0 || err != nil {
			t.Fatalf("reserve(%s) = %q, %v, %v", sp.Name, msg, retry, err)
		}
		pod, _, err := r.desiredPod(sp)
		if err != nil {
			t.Fatal(err)
		}
		r.settle(client.ObjectKeyFromObject(sp), "alpha", pod)
	}
	if n := lists.Load(); n != 1 {
		t.Errorf("%d scans of the pods for 4 admissions that fit, want 1 (the first)", n)
	}
	// The fifth does not fit (4 CPUs granted): counted exactly, refused.
	if msg, _, err := r.reserve(ctx, sps[4], "alpha", PodRequests(&sps[4].Spec.Pod)); msg == "" || err != nil {
		t.Fatalf("reserve(e) = %q, %v; want a refusal", msg, err)
	}
	if n := lists.Load(); n != 2 {
		t.Errorf("%d scans after a check that failed under the bound, want 2", n)
	}
	// A pod that the API server stored with more than was admitted (a
	// provider's webhook added a sidecar) drops the bound.
	if err := c.Delete(ctx, sps[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(sps[0])}); err != nil {
		t.Fatal(err)
	}
	f := shadowPod(t, ns, "f", "cpu=500m")
	if msg, retry, err := r.reserve(ctx, f, "alpha", PodRequests(&f.Spec.Pod)); msg != "" || retry != 0 || err != nil {
		t.Fatalf("reserve(f) = %q, %v, %v", msg, retry, err)
	}
	if r.tenant("alpha").bound.used == nil {
		t.Fatal("no usage bound after an admission")
	}
	stored, _, err := r.desiredPod(f)
	if err != nil {
		t.Fatal(err)
	}
	stored.Spec.Containers = append(stored.Spec.Containers, container(t, "cpu=1", ""))
	r.settle(client.ObjectKeyFromObject(f), "alpha", stored)
	if b := r.tenant("alpha").bound; b.used != nil {
		t.Errorf("usage bound %v kept after the API server stored more than was admitted", b.used)
	}
	if diff := cmp.Diff(rl(t, "cpu=1500m,pods=1"), r.admitted[client.ObjectKeyFromObject(f)].requests, cmpRL); diff != "" {
		t.Errorf("admission counted for (-want +got):\n%s", diff)
	}
}

// TestRefusedCreationLeavesCountsAlone: a pod whose creation fails after it
// was admitted (the API server refuses it) no longer counts, and the usage
// bound that counted it is recounted from the pods: a refused object leaves
// every count as it was. Before, the bound kept it, so a request the API
// server refused (a negative one, before Validate checked quantities)
// lowered the bound, and the admissions after it were checked against room
// that did not exist.
func TestRefusedCreationLeavesCountsAlone(t *testing.T) {
	ctx := context.Background()
	objs := []client.Object{remoteNS(ns, "alpha"), slice(t, "peering", "alpha", corev1alpha1.ResourceSliceAccepted, "cpu=4,memory=8Gi,pods=10")}
	a, refusedSP := shadowPod(t, ns, "a", "cpu=3"), shadowPod(t, ns, "refused", "cpu=500m")
	b := shadowPod(t, ns, "b", "cpu=3")
	objs = append(objs, a, refusedSP, b)
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).Build()
	r := New(c, events.NewFakeRecorder(10), Options{})
	if msg, _, err := r.reserve(ctx, a, "alpha", PodRequests(&a.Spec.Pod)); msg != "" || err != nil {
		t.Fatalf("reserve(a) = %q, %v", msg, err)
	}
	pod, _, err := r.desiredPod(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	r.settle(client.ObjectKeyFromObject(a), "alpha", pod)
	// Admitted, then its creation failed: the bound must not keep it, nor
	// anything it subtracted.
	negative := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-8"), corev1.ResourcePods: resource.MustParse("1")}
	if msg, _, err := r.reserve(ctx, refusedSP, "alpha", negative); msg != "" || err != nil {
		t.Fatalf("reserve(refused) = %q, %v", msg, err)
	}
	r.settle(client.ObjectKeyFromObject(refusedSP), "alpha", nil)
	if got := r.tenant("alpha").bound; got.used != nil {
		t.Errorf("usage bound %v kept after a creation that failed", got.used)
	}
	if msg, _, err := r.reserve(ctx, b, "alpha", PodRequests(&b.Spec.Pod)); msg == "" || err != nil {
		t.Errorf("reserve(b) = %q, %v; want a refusal: 3 CPUs in use of 4", msg, err)
	}
}

// A consumer deletes an admitted ShadowPod with propagationPolicy Orphan:
// its pod runs on without an owner. It still counts, so a new ShadowPod that
// needs its room is refused; and the controller deletes it.
func TestOrphanedPod(t *testing.T) {
	ctx := context.Background()
	a, b, c := shadowPod(t, ns, "a", "cpu=3"), shadowPod(t, ns, "b", "cpu=2"), shadowPod(t, ns, "c", "cpu=2")
	cl := fake.NewClientBuilder().WithScheme(testScheme(t)).
		WithStatusSubresource(&offloadingv1alpha1.ShadowPod{}).
		WithObjects(remoteNS(ns, "alpha"), remoteNS("default", ""), slice(t, "peering", "alpha", corev1alpha1.ResourceSliceAccepted, "cpu=4,memory=8Gi,pods=10"), a).
		Build()
	rec := events.NewFakeRecorder(10)
	r := New(cl, rec, Options{})
	reconcileKey := func(key types.NamespacedName) ctrl.Result {
		t.Helper()
		res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		if err != nil {
			t.Fatalf("Reconcile(%s) error = %v", key, err)
		}
		return res
	}
	reconcileKey(client.ObjectKeyFromObject(a))
	pod := &corev1.Pod{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(a), pod); err != nil {
		t.Fatalf("pod of a: %v", err)
	}
	reconcileKey(client.ObjectKeyFromObject(a)) // the cache shows the pod

	// kubectl delete shadowpod a --cascade=orphan: the garbage collector
	// removes the pod's ownerReference, then the ShadowPod goes.
	pod.OwnerReferences = nil
	if err := cl.Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}

	// b, created before the orphan's deletion is processed: refused, the
	// orphaned pod still runs and counts.
	if err := cl.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	reconcileKey(client.ObjectKeyFromObject(b))
	got := &offloadingv1alpha1.ShadowPod{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(b), got); err != nil {
		t.Fatal(err)
	}
	want := offloadingv1alpha1.ShadowPodStatus{Phase: corev1.PodFailed, Reason: offloadingv1alpha1.ReasonQuotaExceeded,
		Message: quotaRe + "cpu 2 requested + 3 in use exceeds 4 granted"}
	if diff := cmp.Diff(want, got.Status); diff != "" {
		t.Errorf("status of b (-want +got):\n%s", diff)
	}

	// The pod's update (or the ShadowPod's deletion) wakes a's key: the
	// orphan is deleted.
	reconcileKey(client.ObjectKeyFromObject(a))
	if err := cl.Get(ctx, client.ObjectKeyFromObject(a), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Fatalf("orphaned pod: err = %v, want NotFound", err)
	}
	// Its room is free again.
	if err := cl.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	reconcileKey(client.ObjectKeyFromObject(c))
	if err := cl.Get(ctx, client.ObjectKeyFromObject(c), &corev1.Pod{}); err != nil {
		t.Errorf("pod of c: %v", err)
	}

	// An orphan in the way of a new ShadowPod of the same name goes first.
	d := shadowPod(t, ns, "d", "cpu=1")
	left := podOf(shadowPod(t, ns, "d", "cpu=1", func(sp *offloadingv1alpha1.ShadowPod) { sp.UID = "previous" }), func(p *corev1.Pod) {
		p.OwnerReferences = nil
	})
	if err := cl.Create(ctx, left); err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	if res := reconcileKey(client.ObjectKeyFromObject(d)); res.RequeueAfter == 0 {
		t.Errorf("Reconcile(d) = %+v, want a requeue while the orphan goes", res)
	}
	reconcileKey(client.ObjectKeyFromObject(d))
	pod = &corev1.Pod{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(d), pod); err != nil || !metav1.IsControlledBy(pod, d) {
		t.Errorf("pod of d: %v, controlled by d: %v", err, err == nil && metav1.IsControlledBy(pod, d))
	}

	// A pod without an owner in a namespace Annex does not manage for a
	// consumer is not ours to delete, labelled or not.
	foreign := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x", Labels: map[string]string{offloadingv1alpha1.LabelShadowPod: "x"}}}
	if err := cl.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	reconcileKey(client.ObjectKeyFromObject(foreign))
	if err := cl.Get(ctx, client.ObjectKeyFromObject(foreign), &corev1.Pod{}); err != nil {
		t.Errorf("a pod outside the consumer's namespaces: %v", err)
	}

	close(rec.Events)
	var gotEvents []string
	for e := range rec.Events {
		gotEvents = append(gotEvents, e)
	}
	orphanMsg := func(name string) string {
		return "Warning OrphanDeleted pod " + ns + "/" + name + " is labelled annex.dev/shadowpod but no ShadowPod controls it " +
			"(its ShadowPod was deleted with propagationPolicy Orphan): deleted, as a consumer's pod runs only while its ShadowPod exists"
	}
	wantEvents := []string{"Warning QuotaExceeded " + want.Message, orphanMsg("a"), orphanMsg("d")}
	if diff := cmp.Diff(wantEvents, gotEvents); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// The ServiceAccount a pod runs as is created only once its ShadowPod is
// admitted.
func TestServiceAccountOnlyWhenAdmitted(t *testing.T) {
	ctx := context.Background()
	withSA := func(sp *offloadingv1alpha1.ShadowPod) { sp.Spec.Pod.ServiceAccountName = "app" }
	refused, admitted := shadowPod(t, ns, "refused", "cpu=5", withSA), shadowPod(t, "shop-alpha", "admitted", "cpu=1", withSA)
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).
		WithStatusSubresource(&offloadingv1alpha1.ShadowPod{}).
		WithObjects(remoteNS(ns, "alpha"), remoteNS("shop-alpha", "alpha"), slice(t, "peering", "alpha", corev1alpha1.ResourceSliceAccepted, "cpu=4,memory=8Gi,pods=10"), refused, admitted).
		Build()
	r := New(c, events.NewFakeRecorder(10), Options{})
	for _, sp := range []*offloadingv1alpha1.ShadowPod{refused, admitted} {
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(sp)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &corev1.ServiceAccount{}); !apierrors.IsNotFound(err) {
		t.Errorf("ServiceAccount of the refused ShadowPod: err = %v, want NotFound", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop-alpha", Name: "app"}, &corev1.ServiceAccount{}); err != nil {
		t.Errorf("ServiceAccount of the admitted ShadowPod: %v", err)
	}
}

// One consumer's admissions never wait for another's: while alpha's quota
// check is stalled, gamma's goes through; and each consumer's concurrent
// admissions never exceed its own grant.
func TestAdmissionsPerConsumer(t *testing.T) {
	ctx := context.Background()
	consumers := []string{"alpha", "gamma"}
	objs := []client.Object{}
	for _, c := range consumers {
		objs = append(objs, remoteNS("web-"+c, c), slice(t, "peering", c, corev1alpha1.ResourceSliceAccepted, "cpu=4,memory=8Gi,pods=10"))
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var stall atomic.Bool
	stall.Store(true)
	cl := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).
		WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lo := (&client.ListOptions{}).ApplyOptions(opts)
			if _, ok := list.(*corev1.NamespaceList); ok && stall.Load() && lo.LabelSelector != nil &&
				lo.LabelSelector.Matches(labels.Set{corev1alpha1.LabelRemoteClusterID: "alpha", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}) {
				stall.Store(false)
				close(entered)
				<-release
			}
			return c.List(ctx, list, opts...)
		}}).Build()
	r := New(cl, events.NewFakeRecorder(100), Options{})

	stalled := shadowPod(t, "web-alpha", "stalled", "cpu=1")
	done := make(chan error)
	go func() {
		_, _, err := r.reserve(ctx, stalled, "alpha", PodRequests(&stalled.Spec.Pod))
		done <- err
	}()
	<-entered
	other := shadowPod(t, "web-gamma", "first", "cpu=1")
	gammaDone := make(chan string)
	go func() {
		msg, _, err := r.reserve(ctx, other, "gamma", PodRequests(&other.Spec.Pod))
		if err != nil {
			msg = err.Error()
		}
		gammaDone <- msg
	}()
	select {
	case msg := <-gammaDone:
		if msg != "" {
			t.Errorf("gamma's admission = %q, want admitted", msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("gamma's admission waited for alpha's")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// 3 more CPUs for each; 20 concurrent admissions each of 1 CPU.
	var wg sync.WaitGroup
	var admitted [2]atomic.Int32
	for i, c := range consumers {
		for j := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sp := shadowPod(t, "web-"+c, fmt.Sprintf("burst-%d", j), "cpu=1")
				msg, _, err := r.reserve(ctx, sp, c, PodRequests(&sp.Spec.Pod))
				if err != nil {
					t.Error(err)
				}
				if msg == "" {
					admitted[i].Add(1)
				}
			}()
		}
	}
	wg.Wait()
	for i, c := range consumers {
		if n := admitted[i].Load(); n != 3 {
			t.Errorf("%s: %d admitted of 20 concurrent admissions with room for 3", c, n)
		}
	}
}

func TestPodChangeMatters(t *testing.T) {
	base := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "u1", Labels: map[string]string{offloadingv1alpha1.LabelShadowPod: "web"},
				Annotations:     map[string]string{"a": "1"},
				OwnerReferences: []metav1.OwnerReference{{Kind: "ShadowPod", Name: "web", UID: "sp1", Controller: ptr.To(true)}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending},
		}
	}
	now := metav1.Now()
	for _, tc := range []struct {
		name   string
		change func(p *corev1.Pod)
		want   bool
	}{
		{"scheduled", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
		}, false},
		{"running and ready", func(p *corev1.Pod) {
			p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.1"
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}, false},
		{"succeeded", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, true},
		{"failed", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, true},
		{"label changed", func(p *corev1.Pod) { p.Labels["app"] = "x" }, true},
		{"annotation removed", func(p *corev1.Pod) { delete(p.Annotations, "a") }, true},
		{"orphaned", func(p *corev1.Pod) { p.OwnerReferences = nil }, true},
		{"being deleted", func(p *corev1.Pod) { p.DeletionTimestamp = &now }, true},
		{"made again under the same name", func(p *corev1.Pod) { p.UID = "u2" }, true},
	} {
		pod := base()
		tc.change(pod)
		if got := podChangeMatters(base(), pod); got != tc.want {
			t.Errorf("%s: podChangeMatters %v, want %v", tc.name, got, tc.want)
		}
	}
	finished := base()
	finished.Status.Phase = corev1.PodSucceeded
	later := finished.DeepCopy()
	later.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c"}}
	if !podChangeMatters(finished, later) {
		t.Error("a finished pod's status change is dropped: its recorded final state would miss it")
	}
}

// TestMetadataSyncsBoundedPerConsumer: a consumer changing its ShadowPods'
// labels faster than --tenant-sync-rate has its pods patched at that rate,
// each with the ShadowPod's labels as they are when its turn comes, while
// another consumer's pod is patched at once.
func TestMetadataSyncsBoundedPerConsumer(t *testing.T) {
	s := testScheme(t)
	relabelled := func(ns, name string) (*offloadingv1alpha1.ShadowPod, *corev1.Pod) {
		sp := shadowPod(t, ns, name, "cpu=100m")
		pod := podOf(sp, running)
		sp.Spec.PodLabels = map[string]string{"app": "web", "version": "2"}
		return sp, pod
	}
	objs := []client.Object{remoteNS(ns, "alpha"), remoteNS("web-gamma", "gamma"),
		slice(t, "peering", "alpha", corev1alpha1.ResourceSliceAccepted, "cpu=4,memory=8Gi,pods=10")}
	for _, k := range []types.NamespacedName{{Namespace: ns, Name: "a1"}, {Namespace: ns, Name: "a2"}, {Namespace: ns, Name: "a3"}, {Namespace: "web-gamma", Name: "g1"}} {
		sp, pod := relabelled(k.Namespace, k.Name)
		objs = append(objs, sp, pod)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&offloadingv1alpha1.ShadowPod{}).WithObjects(objs...).Build()
	clk := clocktesting.NewFakePassiveClock(now.Time)
	r := New(c, events.NewFakeRecorder(100), Options{Sync: fairqueue.NewLimiter(fairqueue.LimiterOptions{Rate: 1, Burst: 1}, clk)})

	type result struct {
		Key          string
		RequeueAfter time.Duration
		Version      string // the pod's label "version" afterwards
	}
	steps := []struct {
		advance time.Duration
		ns, sp  string
	}{
		{0, ns, "a1"},          // alpha's token
		{0, ns, "a2"},          // alpha's next turn, in 1 s
		{0, ns, "a3"},          // and the one after, in 2 s
		{0, "web-gamma", "g1"}, // gamma is not held up
		{500 * time.Millisecond, ns, "a2"},
		{500 * time.Millisecond, ns, "a2"}, // its turn
		{time.Second, ns, "a3"},            // its turn
	}
	want := []result{
		{"web-alpha/a1", 0, "2"},
		{"web-alpha/a2", time.Second, ""},
		{"web-alpha/a3", 2 * time.Second, ""},
		{"web-gamma/g1", 0, "2"},
		{"web-alpha/a2", 500 * time.Millisecond, ""},
		{"web-alpha/a2", 0, "2"},
		{"web-alpha/a3", 0, "2"},
	}
	var got []result
	ctx := context.Background()
	for _, st := range steps {
		clk.SetTime(clk.Now().Add(st.advance))
		key := types.NamespacedName{Namespace: st.ns, Name: st.sp}
		res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		if err != nil {
			t.Fatalf("Reconcile(%s): %v", key, err)
		}
		pod := &corev1.Pod{}
		if err := c.Get(ctx, key, pod); err != nil {
			t.Fatal(err)
		}
		got = append(got, result{key.String(), res.RequeueAfter, pod.Labels["version"]})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reconciles (-want +got):\n%s", diff)
	}
}
