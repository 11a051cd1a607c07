package reflection

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

const (
	consumer = "alpha"
	beta     = "beta"
	gamma    = "gamma"
	ns       = "app"
	remoteNS = "app-alpha" // DefaultName on every provider
	resync   = 10 * time.Minute
)

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

// fakeRemotes is a Remotes stub with one client per provider, or an error.
type fakeRemotes struct {
	mu      sync.Mutex
	clients map[string]client.Client
	errs    map[string]error
	calls   map[string]int
}

func (f *fakeRemotes) Client(id string) (client.Client, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[id]++
	if err := f.errs[id]; err != nil {
		return nil, err
	}
	c, ok := f.clients[id]
	if !ok {
		return nil, fmt.Errorf("remote: peer %q: unknown peer", id)
	}
	return c, nil
}

func (f *fakeRemotes) Subscribe() <-chan event.TypedGenericEvent[*corev1alpha1.ForeignCluster] {
	return make(chan event.TypedGenericEvent[*corev1alpha1.ForeignCluster])
}

func (f *fakeRemotes) callsTo(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[id]
}

// writeCounter counts the writes through a client.
type writeCounter struct {
	mu sync.Mutex
	n  int
}

func (w *writeCounter) inc() {
	w.mu.Lock()
	w.n++
	w.mu.Unlock()
}

func (w *writeCounter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

func (w *writeCounter) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			w.inc()
			return c.Create(ctx, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			w.inc()
			return c.Update(ctx, o, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			w.inc()
			return c.Patch(ctx, o, p, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			w.inc()
			return c.Delete(ctx, o, opts...)
		},
	}
}

// forbidden returns a client that fails the test on any call.
func forbidden(t *testing.T, s *runtime.Scheme, who string) client.Client {
	fail := func(op string) error {
		t.Errorf("unexpected %s call on %s", op, who)
		return fmt.Errorf("%s must not be called", who)
	}
	return fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return fail("Get")
		},
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return fail("List")
		},
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
			return fail("Create")
		},
		Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error {
			return fail("Update")
		},
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return fail("Patch")
		},
		Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error {
			return fail("Delete")
		},
		DeleteAllOf: func(context.Context, client.WithWatch, client.Object, ...client.DeleteAllOfOption) error {
			return fail("DeleteAllOf")
		},
		Apply: func(context.Context, client.WithWatch, runtime.ApplyConfiguration, ...client.ApplyOption) error {
			return fail("Apply")
		},
		Watch: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
			return nil, fail("Watch")
		},
		SubResourceGet: func(context.Context, client.Client, string, client.Object, client.Object, ...client.SubResourceGetOption) error {
			return fail("SubResourceGet")
		},
		SubResourceCreate: func(context.Context, client.Client, string, client.Object, client.Object, ...client.SubResourceCreateOption) error {
			return fail("SubResourceCreate")
		},
		SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
			return fail("SubResourceUpdate")
		},
		SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
			return fail("SubResourcePatch")
		},
	}).Build()
}

// world is a consumer and its providers.
type world struct {
	t       *testing.T
	scheme  *runtime.Scheme
	local   client.Client
	remotes *fakeRemotes
	writes  map[string]*writeCounter
	rec     *events.FakeRecorder
	r       *Reconciler
}

// newWorld starts a consumer with objs (add nso and fc objects as needed)
// and one fake cluster per entry of providers.
func newWorld(t *testing.T, objs []client.Object, providers map[string][]client.Object) *world {
	t.Helper()
	s := testScheme(t)
	w := &world{
		t:       t,
		scheme:  s,
		local:   fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&offloadingv1alpha1.NamespaceOffloading{}).Build(),
		remotes: &fakeRemotes{clients: map[string]client.Client{}, errs: map[string]error{}, calls: map[string]int{}},
		writes:  map[string]*writeCounter{},
		rec:     events.NewFakeRecorder(100),
	}
	for id, objs := range providers {
		wc := &writeCounter{}
		w.writes[id] = wc
		w.remotes.clients[id] = fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithInterceptorFuncs(wc.funcs()).Build()
	}
	w.r = New(w.local, w.remotes, consumer, Options{Recorder: w.rec, ResyncPeriod: resync})
	return w
}

func (w *world) reconcile(kind Kind) ctrl.Result {
	w.t.Helper()
	res, err := w.r.reconcileKind(ctx(w.t), kind, ns)
	if err != nil {
		w.t.Fatalf("reconcile %s: %v", kind, err)
	}
	return res
}

// remoteObjects returns the remote objects of kind on provider, normalized.
func (w *world) remoteObjects(provider string, kind Kind) []client.Object {
	w.t.Helper()
	objs, err := w.r.reflectors[kind].listRemote(ctx(w.t), w.remotes.clients[provider], remoteNS)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, o := range objs {
		normalize(o)
	}
	slices.SortFunc(objs, func(a, b client.Object) int { return strings.Compare(a.GetName(), b.GetName()) })
	return objs
}

func (w *world) events() []string {
	var out []string
	for {
		select {
		case e := <-w.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func ctx(t *testing.T) context.Context { return t.Context() }

// normalize clears what the API server sets.
func normalize(o client.Object) {
	o.SetResourceVersion("")
	o.SetUID("")
	o.SetCreationTimestamp(metav1.Time{})
	o.SetManagedFields(nil)
	o.SetGeneration(0)
	o.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
}

// Fixtures.

func nso(entries ...offloadingv1alpha1.ProviderNamespaceStatus) *offloadingv1alpha1.NamespaceOffloading {
	return &offloadingv1alpha1.NamespaceOffloading{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: offloadingv1alpha1.NamespaceOffloadingName},
		Status:     offloadingv1alpha1.NamespaceOffloadingStatus{RemoteNamespaces: entries},
	}
}

func ready(provider string) offloadingv1alpha1.ProviderNamespaceStatus {
	return offloadingv1alpha1.ProviderNamespaceStatus{ClusterID: provider, RemoteNamespace: remoteNS, Phase: offloadingv1alpha1.RemoteNamespaceReady}
}

func fc(provider string, unreachable bool) *corev1alpha1.ForeignCluster {
	return &corev1alpha1.ForeignCluster{
		ObjectMeta: metav1.ObjectMeta{Name: provider},
		Spec:       corev1alpha1.ForeignClusterSpec{ClusterID: provider, Unreachable: unreachable},
	}
}

// ours returns the labels of a remote copy with extra labels.
func ours(extra map[string]string) map[string]string {
	l := map[string]string{corev1alpha1.LabelRemoteClusterID: consumer, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}
	for k, v := range extra {
		l[k] = v
	}
	return l
}

func configMap(namespace, name string, labels, annotations, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels, Annotations: annotations},
		Data:       data,
	}
}

func secret(namespace, name string, typ corev1.SecretType, labels, annotations map[string]string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels, Annotations: annotations},
		Type:       typ,
	}
	for k, v := range data {
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[k] = []byte(v)
	}
	return s
}

func skip() map[string]string {
	return map[string]string{corev1alpha1.AnnotationSkipReflection: "true"}
}

func ptrTo[T any](v T) *T { return &v }

func service(namespace, name string, annotations map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app": name}, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeClusterIP,
			Selector:              map[string]string{"app": name},
			ClusterIP:             "10.96.0.10",
			ClusterIPs:            []string{"10.96.0.10"},
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol},
			IPFamilyPolicy:        ptrTo(corev1.IPFamilyPolicySingleStack),
			SessionAffinity:       corev1.ServiceAffinityNone,
			InternalTrafficPolicy: ptrTo(corev1.ServiceInternalTrafficPolicyCluster),
			Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
}

func endpoint(addr string, node string, ready bool) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{
		Addresses:  []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(ready), Serving: ptrTo(ready), Terminating: ptrTo(false)},
	}
	if node != "" {
		ep.NodeName = ptrTo(node)
	}
	return ep
}
