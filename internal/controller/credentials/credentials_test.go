package credentials

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

func jwt(t *testing.T, iat, exp time.Time) string {
	t.Helper()
	payload, _ := json.Marshal(map[string]int64{"iat": iat.Unix(), "exp": exp.Unix()})
	return "e30." + base64.RawURLEncoding.EncodeToString(payload) + ".sig"
}

func kubeconfig(t *testing.T, token string) []byte {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["p"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	kc.AuthInfos["p"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["p"] = &clientcmdapi.Context{Cluster: "p", AuthInfo: "p"}
	kc.CurrentContext = "p"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestTokenTimes(t *testing.T) {
	iat := time.Unix(1_800_000_000, 0)
	exp := iat.Add(time.Hour)
	gotIAT, gotEXP, err := tokenTimes(kubeconfig(t, jwt(t, iat, exp)))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]time.Time{iat, exp}, []time.Time{gotIAT, gotEXP}); diff != "" {
		t.Error(diff)
	}
	for name, token := range map[string]string{"opaque": "abc", "bad payload": "a.!!!.c", "no claims": "a." + base64.RawURLEncoding.EncodeToString([]byte("{}")) + ".c"} {
		if _, _, err := tokenTimes(kubeconfig(t, token)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	swapped, err := replaceToken(kubeconfig(t, "old"), "new")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := clientcmd.Load(swapped)
	if cfg.AuthInfos["p"].Token != "new" || cfg.Clusters["p"].Server != "https://127.0.0.1:1" {
		t.Errorf("replaceToken changed the wrong things: %+v", cfg)
	}
}

type remotes struct {
	c   client.Client
	err error
}

func (r remotes) Client(string) (client.Client, error) { return r.c, r.err }

func TestReconcileTiming(t *testing.T) {
	iat := time.Unix(1_800_000_000, 0)
	exp := iat.Add(30 * time.Minute)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = corev1alpha1.AddToScheme(scheme)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: corev1alpha1.CredentialsSecretName, Namespace: "annex-peer-beta",
			Labels:      map[string]string{corev1alpha1.LabelRemoteClusterID: "beta", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex},
			Annotations: map[string]string{corev1alpha1.AnnotationServiceAccount: "annex-tenant-alpha/annex-consumer"}},
		Data: map[string][]byte{corev1alpha1.CredentialsKubeconfigKey: kubeconfig(t, jwt(t, iat, exp))},
	}
	for _, tc := range []struct {
		name    string
		now     time.Time
		fc      *corev1alpha1.ForeignCluster
		remotes remotes
		want    ctrl.Result
	}{
		{name: "not due yet", now: iat.Add(5 * time.Minute), want: ctrl.Result{RequeueAfter: 10 * time.Minute}},
		{name: "due, provider unreachable", now: iat.Add(25 * time.Minute), remotes: remotes{err: errors.New("unreachable")}, want: ctrl.Result{RequeueAfter: 5 * time.Second}},
		{name: "due, marked unreachable", now: iat.Add(25 * time.Minute),
			fc:   &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "beta"}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "beta", Unreachable: true}},
			want: ctrl.Result{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(secret.DeepCopy())
			if tc.fc != nil {
				b = b.WithObjects(tc.fc)
			}
			c := b.Build()
			r := &Reconciler{Client: c, Secrets: c, Remotes: tc.remotes, Clock: clocktesting.NewFakeClock(tc.now),
				Recorder: events.NewFakeRecorder(10), RenewFraction: 0.5, Retry: 5 * time.Second}
			got, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: secret.Namespace, Name: secret.Name}})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		})
	}
}
