package foreigncluster

import (
	"context"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/remote"
)

func TestMain(m *testing.M) {
	// client.New logs through controller-runtime's global logger.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

const (
	peerNS     = "annex-peer-beta"
	secretName = "beta-credentials"
)

// apiServer stands in for the peer's API server: /readyz answers 200 to
// the accepted bearer token and 401 to any other.
type apiServer struct {
	srv   *httptest.Server
	token atomic.Pointer[string]
	caPEM []byte
}

func newAPIServer(t *testing.T, token string) *apiServer {
	t.Helper()
	s := &apiServer{}
	s.token.Store(&token)
	s.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+*s.token.Load() {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(s.srv.Close)
	s.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
	return s
}

// kubeconfig is a self-contained kubeconfig for server with token.
func kubeconfig(t *testing.T, server string, ca []byte, token string) []byte {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["beta"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	kc.AuthInfos["alpha"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["beta"] = &clientcmdapi.Context{Cluster: "beta", AuthInfo: "alpha"}
	kc.CurrentContext = "beta"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func credentialsSecret(data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: peerNS, Name: secretName}, Data: data}
}

func foreignCluster(mutate ...func(*corev1alpha1.ForeignCluster)) *corev1alpha1.ForeignCluster {
	fc := &corev1alpha1.ForeignCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "beta"},
		Spec: corev1alpha1.ForeignClusterSpec{
			ClusterID:            "beta",
			CredentialsSecretRef: &corev1alpha1.SecretReference{Namespace: peerNS, Name: secretName},
		},
	}
	for _, m := range mutate {
		m(fc)
	}
	return fc
}

// env is a reconciler over a fake local cluster and a running remote.Manager.
type env struct {
	r       *Reconciler
	local   client.Client
	patches atomic.Int64
}

func newEnv(t *testing.T, objs ...client.Object) *env {
	t.Helper()
	e := &env{}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, corev1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	e.local = fake.NewClientBuilder().
		WithScheme(scheme).
		WithObjects(objs...).
		WithStatusSubresource(&corev1alpha1.ForeignCluster{}).
		WithIndex(&corev1alpha1.ForeignCluster{}, IndexCredentialsSecret, CredentialsSecretIndexValue).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				e.patches.Add(1)
				return c.Status().Patch(ctx, obj, patch, opts...)
			},
		}).
		Build()
	o := remote.Options{ProbeInterval: 20 * time.Millisecond, ProbeTimeout: 500 * time.Millisecond, StatusRefresh: time.Hour}
	m := remote.NewManager(e.local, scheme, o, clock.RealClock{}, testr.New(t).WithName("remote"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("remote.Manager.Start: %v", err)
		}
	})
	e.r = &Reconciler{Client: e.local, Secrets: e.local, Remote: m, Clock: clock.RealClock{}}
	return e
}

func (e *env) reconcile(t *testing.T) {
	t.Helper()
	ctx := ctrllog.IntoContext(context.Background(), testr.New(t))
	if _, err := e.r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "beta"}}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
}

// updateSpec changes the ForeignCluster.
func (e *env) updateSpec(t *testing.T, mutate func(*corev1alpha1.ForeignCluster)) {
	t.Helper()
	fc := &corev1alpha1.ForeignCluster{}
	if err := e.local.Get(context.Background(), client.ObjectKey{Name: "beta"}, fc); err != nil {
		t.Fatal(err)
	}
	mutate(fc)
	if err := e.local.Update(context.Background(), fc); err != nil {
		t.Fatal(err)
	}
}

// cond returns a condition of the ForeignCluster without its transition time.
func (e *env) cond(t *testing.T, typ string) *metav1.Condition {
	t.Helper()
	fc := &corev1alpha1.ForeignCluster{}
	if err := e.local.Get(context.Background(), client.ObjectKey{Name: "beta"}, fc); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(fc.Status.Conditions, typ)
	if c == nil {
		return nil
	}
	out := *c
	out.LastTransitionTime = metav1.Time{}
	return &out
}

func (e *env) waitCond(t *testing.T, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := e.cond(t, typ)
		if c != nil && c.Status == status && c.Reason == reason {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s=%s/%s, last seen %+v", typ, status, reason, c)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *env) clientErr() error {
	_, err := e.r.Remote.Client("beta")
	return err
}

func closedPortURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "https://" + l.Addr().String()
}

func TestReconcileCredentialsProblems(t *testing.T) {
	tests := []struct {
		name    string
		objs    func(t *testing.T) []client.Object
		wantMsg string
	}{
		{
			name:    "Secret missing",
			objs:    func(t *testing.T) []client.Object { return []client.Object{foreignCluster()} },
			wantMsg: "Secret annex-peer-beta/beta-credentials not found",
		},
		{
			name: "no kubeconfig key",
			objs: func(t *testing.T) []client.Object {
				return []client.Object{foreignCluster(), credentialsSecret(map[string][]byte{"token": []byte("x")})}
			},
			wantMsg: `Secret annex-peer-beta/beta-credentials has no "kubeconfig" key`,
		},
		{
			name: "kubeconfig with an exec plugin",
			objs: func(t *testing.T) []client.Object {
				kc := clientcmdapi.NewConfig()
				kc.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
				kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "/bin/true", APIVersion: "client.authentication.k8s.io/v1"}}
				kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
				kc.CurrentContext = "c"
				data, err := clientcmd.Write(*kc)
				if err != nil {
					t.Fatal(err)
				}
				return []client.Object{foreignCluster(), credentialsSecret(map[string][]byte{KubeconfigKey: data})}
			},
			wantMsg: "Secret annex-peer-beta/beta-credentials: kubeconfig refused: exec credential plugins are not allowed",
		},
		{
			name: "apiServerURL but no credentials",
			objs: func(t *testing.T) []client.Object {
				return []client.Object{foreignCluster(func(fc *corev1alpha1.ForeignCluster) {
					fc.Spec.CredentialsSecretRef = nil
					fc.Spec.APIServerURL = "https://beta.example.com:6443"
				})}
			},
			wantMsg: "spec.credentialsSecretRef is not set: there are no credentials to call https://beta.example.com:6443",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.objs(t)...)
			e.reconcile(t)
			want := map[string]*metav1.Condition{
				corev1alpha1.ConditionAuthenticated: {
					Type: corev1alpha1.ConditionAuthenticated, Status: metav1.ConditionFalse,
					Reason: corev1alpha1.ReasonCredentialsMissing, Message: tc.wantMsg,
				},
				corev1alpha1.ConditionAPIServerReachable: {
					Type: corev1alpha1.ConditionAPIServerReachable, Status: metav1.ConditionUnknown,
					Reason: corev1alpha1.ReasonCredentialsMissing, Message: "not probed: " + tc.wantMsg,
				},
			}
			got := map[string]*metav1.Condition{}
			for typ := range want {
				got[typ] = e.cond(t, typ)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if err := e.clientErr(); !errors.Is(err, remote.ErrUnknownPeer) {
				t.Errorf("Client() error = %v, want ErrUnknownPeer", err)
			}
			// Reconciling again writes nothing.
			before := e.patches.Load()
			e.reconcile(t)
			if got := e.patches.Load(); got != before {
				t.Errorf("second Reconcile wrote the status %d times", got-before)
			}
		})
	}
}

func TestReconcileNoAPIServerURL(t *testing.T) {
	e := newEnv(t, foreignCluster(func(fc *corev1alpha1.ForeignCluster) { fc.Spec.CredentialsSecretRef = nil }))
	e.reconcile(t)
	want := &metav1.Condition{
		Type: corev1alpha1.ConditionAPIServerReachable, Status: metav1.ConditionUnknown, Reason: corev1alpha1.ReasonNoAPIServerURL,
		Message: "spec.apiServerURL is empty: this cluster never calls the remote one, so it does not probe it",
	}
	if diff := cmp.Diff(want, e.cond(t, corev1alpha1.ConditionAPIServerReachable)); diff != "" {
		t.Errorf("APIServerReachable (-want +got):\n%s", diff)
	}
	if c := e.cond(t, corev1alpha1.ConditionAuthenticated); c != nil {
		t.Errorf("Authenticated = %+v, want none", c)
	}
	e.reconcile(t)
	e.reconcile(t)
	if got := e.patches.Load(); got != 1 {
		t.Errorf("%d status patches after three reconciles, want 1", got)
	}
	if err := e.clientErr(); !errors.Is(err, remote.ErrUnknownPeer) {
		t.Errorf("Client() error = %v, want ErrUnknownPeer", err)
	}
}

func TestReconcilePeerLifecycle(t *testing.T) {
	s := newAPIServer(t, "tok")
	secret := credentialsSecret(map[string][]byte{KubeconfigKey: kubeconfig(t, s.srv.URL, s.caPEM, "tok")})
	e := newEnv(t, foreignCluster(), secret)

	e.reconcile(t)
	e.waitCond(t, corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)
	e.waitCond(t, corev1alpha1.ConditionAuthenticated, metav1.ConditionTrue, corev1alpha1.ReasonCredentialsValid)
	if err := e.clientErr(); err != nil {
		t.Fatalf("Client(): %v", err)
	}

	// Forced unpeer: spec.unreachable.
	e.updateSpec(t, func(fc *corev1alpha1.ForeignCluster) { fc.Spec.Unreachable = true })
	e.reconcile(t)
	if err := e.clientErr(); !errors.Is(err, remote.ErrPermanentlyUnreachable) {
		t.Errorf("Client() error = %v, want ErrPermanentlyUnreachable", err)
	}
	e.waitCond(t, corev1alpha1.ConditionAPIServerReachable, metav1.ConditionFalse, corev1alpha1.ReasonMarkedUnreachable)

	// The mark is cleared: probing resumes.
	e.updateSpec(t, func(fc *corev1alpha1.ForeignCluster) { fc.Spec.Unreachable = false })
	e.reconcile(t)
	e.waitCond(t, corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)

	// The credentials disappear.
	if err := e.local.Delete(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t)
	if err := e.clientErr(); !errors.Is(err, remote.ErrUnknownPeer) {
		t.Errorf("Client() error = %v, want ErrUnknownPeer", err)
	}
	e.waitCond(t, corev1alpha1.ConditionAuthenticated, metav1.ConditionFalse, corev1alpha1.ReasonCredentialsMissing)

	// The ForeignCluster is deleted.
	if err := e.local.Delete(context.Background(), foreignCluster()); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t)
	if err := e.clientErr(); !errors.Is(err, remote.ErrUnknownPeer) {
		t.Errorf("Client() error = %v, want ErrUnknownPeer", err)
	}
}

func TestReconcileDeletedForeignClusterRemovesPeer(t *testing.T) {
	s := newAPIServer(t, "tok")
	secret := credentialsSecret(map[string][]byte{KubeconfigKey: kubeconfig(t, s.srv.URL, s.caPEM, "tok")})
	fc := foreignCluster()
	e := newEnv(t, fc, secret)
	e.reconcile(t)
	e.waitCond(t, corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)
	if err := e.local.Delete(context.Background(), fc); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t)
	if err := e.clientErr(); !errors.Is(err, remote.ErrUnknownPeer) {
		t.Errorf("Client() error = %v, want ErrUnknownPeer", err)
	}
}

func TestReconcileRenewedToken(t *testing.T) {
	s := newAPIServer(t, "renewed")
	secret := credentialsSecret(map[string][]byte{KubeconfigKey: kubeconfig(t, s.srv.URL, s.caPEM, "expired")})
	e := newEnv(t, foreignCluster(), secret)
	e.reconcile(t)
	e.waitCond(t, corev1alpha1.ConditionAuthenticated, metav1.ConditionFalse, corev1alpha1.ReasonCredentialsRejected)
	e.waitCond(t, corev1alpha1.ConditionAPIServerReachable, metav1.ConditionFalse, corev1alpha1.ReasonCredentialsRejected)

	// The token is renewed: the Secret update maps to the ForeignCluster.
	secret.Data[KubeconfigKey] = kubeconfig(t, s.srv.URL, s.caPEM, "renewed")
	if err := e.local.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	reqs := e.r.ForeignClustersForSecret(context.Background(), secret)
	want := []reconcile.Request{{NamespacedName: types.NamespacedName{Name: "beta"}}}
	if diff := cmp.Diff(want, reqs); diff != "" {
		t.Fatalf("ForeignClustersForSecret (-want +got):\n%s", diff)
	}
	e.reconcile(t)
	e.waitCond(t, corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)
	e.waitCond(t, corev1alpha1.ConditionAuthenticated, metav1.ConditionTrue, corev1alpha1.ReasonCredentialsValid)
}

func TestReconcileAPIServerURLWins(t *testing.T) {
	s := newAPIServer(t, "tok")
	secret := credentialsSecret(map[string][]byte{KubeconfigKey: kubeconfig(t, closedPortURL(t), s.caPEM, "tok")})
	e := newEnv(t, foreignCluster(func(fc *corev1alpha1.ForeignCluster) { fc.Spec.APIServerURL = s.srv.URL }), secret)
	e.reconcile(t)
	e.waitCond(t, corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)
}

func TestForeignClustersForSecret(t *testing.T) {
	other := func(name string, ns, secret string) *corev1alpha1.ForeignCluster {
		return foreignCluster(func(fc *corev1alpha1.ForeignCluster) {
			fc.Name, fc.Spec.ClusterID = name, name
			if secret == "" {
				fc.Spec.CredentialsSecretRef = nil
				return
			}
			fc.Spec.CredentialsSecretRef = &corev1alpha1.SecretReference{Namespace: ns, Name: secret}
		})
	}
	e := newEnv(t,
		foreignCluster(),
		other("gamma", peerNS, secretName), // shares the Secret (unusual, but allowed)
		other("delta", "annex-peer-delta", secretName),
		other("epsilon", "", ""),
	)
	tests := []struct {
		name      string
		namespace string
		secret    string
		want      []reconcile.Request
	}{
		{name: "referenced twice", namespace: peerNS, secret: secretName, want: []reconcile.Request{
			{NamespacedName: types.NamespacedName{Name: "beta"}},
			{NamespacedName: types.NamespacedName{Name: "gamma"}},
		}},
		{name: "same name in another namespace", namespace: "annex-peer-delta", secret: secretName, want: []reconcile.Request{
			{NamespacedName: types.NamespacedName{Name: "delta"}},
		}},
		{name: "unrelated", namespace: "default", secret: "token", want: []reconcile.Request{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			secret := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: tc.secret}}
			got := e.r.ForeignClustersForSecret(context.Background(), secret)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}
