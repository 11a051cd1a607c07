package peer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/agent"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/cli/install"
	"github.com/annexhq/annex/internal/controller/replicator"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/localcluster/clustertest"
)

// On provider beta, consumer alpha holds exactly the credential `annexctl
// peer` mints for it. beta also consumes alpha (a two-way peering), so beta
// keeps its own objects for alpha in annex-peer-alpha. The names used below.
const (
	provider  = "beta"
	consumer  = "alpha"
	third     = "gamma" // a cluster beta also peers with
	tenantNS  = "annex-tenant-alpha"
	peerNS    = "annex-peer-alpha"
	otherTen  = "annex-tenant-gamma"
	heartbeat = corev1alpha1.HeartbeatLeaseName
)

// TestTenantSurface: with a real API server running the Role and the
// admission policy `annexctl install` and `annexctl peer` set up, a tenant
// can do exactly what its agent does in its tenant namespace, and none of
// the confused-deputy or credential-theft moves of issue #16 succeed.
func TestTenantSurface(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	lc := clustertest.Start(ctx, t, localcluster.Options{Name: provider, PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", Nodes: 1,
		BeforeControllers: clustertest.ApplyCRDs})
	p := clustertest.Connect(ctx, t, lc)
	o := install.DefaultOptions()
	o.ClusterID, o.LocalAgent = provider, true
	var out bytes.Buffer
	if err := install.Run(ctx, cli.IOStreams{Out: &out, ErrOut: &out}, p, o); err != nil {
		t.Fatalf("install: %v\n%s", err, out.String())
	}

	// What `annexctl peer` leaves on beta for both directions, and a tenant
	// of a third cluster.
	_, err := applyAll(ctx, p.Client, append(TenantObjects(tenantNS, consumer), TenantObjects(otherTen, third)...)...)
	clustertest.Must(t, err)
	own := providerObjects(t)
	_, err = applyAll(ctx, p.Client, PeerNamespace(peerNS, consumer))
	clustertest.Must(t, err)
	for _, obj := range own {
		clustertest.Must(t, p.Client.Create(ctx, obj))
	}
	// Objects in alpha's tenant namespace that alpha did not write.
	legacy := slice(tenantNS, "legacy", consumer, consumer, provider, false)
	clustertest.Must(t, p.Client.Create(ctx, legacy))
	otherLease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "annex-other"}}
	clustertest.Must(t, p.Client.Create(ctx, otherLease))
	clustertest.Must(t, p.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "other"}}))

	tc := tenantClient(ctx, t, p)

	// The policy is served a moment after it is created: wait until a
	// dry-run of the simplest refused write is refused.
	probe := slice(tenantNS, "probe", third, consumer, provider, false)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := tc.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return apierrors.IsInvalid(err), nil
	})
	if err != nil {
		t.Fatalf("the admission policy annex-tenant-namespace never refused an unannotated ResourceSlice: %v", err)
	}

	const forbidden = "Forbidden"
	steps := []struct {
		name string
		do   func(ctx context.Context) error
		want string // "": allowed; "Forbidden"; otherwise Invalid with this in the message
	}{
		// What alpha's agent does: all allowed.
		{"replicator creates its ResourceSlice replica", func(ctx context.Context) error {
			return tc.Create(ctx, slice(tenantNS, "peering", consumer, consumer, provider, true))
		}, ""},
		{"replicator reads it back (with the provider's status)", func(ctx context.Context) error {
			return tc.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: "peering"}, &corev1alpha1.ResourceSlice{})
		}, ""},
		{"replicator updates it", func(ctx context.Context) error {
			rs := &corev1alpha1.ResourceSlice{}
			if err := tc.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: "peering"}, rs); err != nil {
				return err
			}
			rs.Spec.Resources[corev1.ResourceCPU] = resource.MustParse("2")
			return tc.Update(ctx, rs)
		}, ""},
		{"replicator creates its RemoteNamespace replica", func(ctx context.Context) error {
			return tc.Create(ctx, remoteNamespace(tenantNS, "shop", consumer, true))
		}, ""},
		{"replicator deletes its RemoteNamespace replica", func(ctx context.Context) error {
			return tc.Delete(ctx, remoteNamespace(tenantNS, "shop", consumer, true))
		}, ""},
		{"heartbeat creates its Lease", func(ctx context.Context) error {
			return tc.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: heartbeat},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(consumer)}})
		}, ""},
		{"heartbeat renews its Lease", func(ctx context.Context) error {
			l := &coordinationv1.Lease{}
			if err := tc.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: heartbeat}, l); err != nil {
				return err
			}
			patch := client.MergeFrom(l.DeepCopy())
			now := metav1.NewMicroTime(time.Now())
			l.Spec.RenewTime = &now
			return tc.Patch(ctx, l, patch)
		}, ""},
		{"credentials controller renews its token", func(ctx context.Context) error {
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: ConsumerServiceAccount}}
			return tc.SubResource("token").Create(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(600))}})
		}, ""},

		// Confused deputy: objects labelled for a third cluster.
		{"create an unannotated ResourceSlice labelled for gamma", func(ctx context.Context) error {
			return tc.Create(ctx, slice(tenantNS, "to-gamma", third, consumer, provider, false))
		}, "metadata.annotations[annex.dev/origin-namespace] is missing"},
		{"create an annotated ResourceSlice labelled for gamma", func(ctx context.Context) error {
			return tc.Create(ctx, slice(tenantNS, "to-gamma", third, consumer, provider, true))
		}, `metadata.labels[annex.dev/remote-cluster-id] is "gamma", must be "alpha"`},
		{"create a ResourceSlice on behalf of gamma", func(ctx context.Context) error {
			return tc.Create(ctx, slice(tenantNS, "for-gamma", consumer, third, provider, true))
		}, `spec.consumerClusterID is "gamma", must be "alpha"`},
		{"create an unannotated RemoteNamespace labelled for gamma", func(ctx context.Context) error {
			return tc.Create(ctx, remoteNamespace(tenantNS, "to-gamma", third, false))
		}, "metadata.annotations[annex.dev/origin-namespace] is missing"},
		{"create an annotated RemoteNamespace labelled for gamma", func(ctx context.Context) error {
			return tc.Create(ctx, remoteNamespace(tenantNS, "to-gamma", third, true))
		}, `metadata.labels[annex.dev/remote-cluster-id] is "gamma", must be "alpha"`},
		{"relabel its replica for gamma", func(ctx context.Context) error {
			rs := &corev1alpha1.ResourceSlice{}
			if err := tc.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: "peering"}, rs); err != nil {
				return err
			}
			rs.Labels[corev1alpha1.LabelRemoteClusterID] = third
			return tc.Update(ctx, rs)
		}, `metadata.labels[annex.dev/remote-cluster-id] is "gamma"`},
		{"write into gamma's tenant namespace", func(ctx context.Context) error {
			return tc.Create(ctx, slice(otherTen, "peering", third, third, provider, true))
		}, forbidden},

		// The provider's own objects for alpha (annex-peer-alpha).
		{"read beta's ResourceSlice for alpha", func(ctx context.Context) error {
			return tc.Get(ctx, client.ObjectKeyFromObject(own[1]), &corev1alpha1.ResourceSlice{})
		}, forbidden},
		{"update beta's ResourceSlice for alpha", func(ctx context.Context) error {
			return tc.Update(ctx, own[1].DeepCopyObject().(client.Object))
		}, forbidden},
		{"delete beta's ResourceSlice for alpha", func(ctx context.Context) error {
			return tc.Delete(ctx, own[1].DeepCopyObject().(client.Object))
		}, forbidden},
		{"delete beta's RemoteNamespace for alpha", func(ctx context.Context) error {
			return tc.Delete(ctx, own[2].DeepCopyObject().(client.Object))
		}, forbidden},
		{"update beta's VirtualNode for alpha", func(ctx context.Context) error {
			return tc.Update(ctx, own[3].DeepCopyObject().(client.Object))
		}, forbidden},
		{"create a RemoteNamespace in beta's peer namespace", func(ctx context.Context) error {
			return tc.Create(ctx, remoteNamespace(peerNS, "evil", consumer, false))
		}, forbidden},
		{"read beta's kubeconfig Secret for alpha", func(ctx context.Context) error {
			return tc.Get(ctx, client.ObjectKeyFromObject(own[0]), &corev1.Secret{})
		}, forbidden},
		{"rewrite beta's kubeconfig Secret for alpha", func(ctx context.Context) error {
			s := own[0].DeepCopyObject().(*corev1.Secret)
			s.Data[corev1alpha1.CredentialsKubeconfigKey] = []byte("apiVersion: v1\nkind: Config\nclusters: [{name: x, cluster: {server: https://attacker.invalid}}]\n")
			return tc.Update(ctx, s)
		}, forbidden},
		{"list Secrets in beta's peer namespace", func(ctx context.Context) error {
			return tc.List(ctx, &corev1.SecretList{}, client.InNamespace(peerNS))
		}, forbidden},

		// What alpha's own tenant namespace no longer lets it do.
		{"list Secrets in its tenant namespace", func(ctx context.Context) error {
			return tc.List(ctx, &corev1.SecretList{}, client.InNamespace(tenantNS))
		}, forbidden},
		{"create a Secret in its tenant namespace", func(ctx context.Context) error {
			return tc.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: CredentialsSecret}})
		}, forbidden},
		{"create a ConfigMap in its tenant namespace", func(ctx context.Context) error {
			return tc.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "x"}})
		}, forbidden},
		{"create a Service in its tenant namespace", func(ctx context.Context) error {
			return tc.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "x"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}})
		}, forbidden},
		{"create an Event in its tenant namespace", func(ctx context.Context) error {
			return tc.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "x"},
				InvolvedObject: corev1.ObjectReference{Namespace: tenantNS, Name: "peering"}})
		}, forbidden},
		{"list the ResourceSlices in its tenant namespace", func(ctx context.Context) error {
			return tc.List(ctx, &corev1alpha1.ResourceSliceList{}, client.InNamespace(tenantNS))
		}, forbidden},
		{"update a ResourceSlice it did not write", func(ctx context.Context) error {
			rs := &corev1alpha1.ResourceSlice{}
			if err := tc.Get(ctx, client.ObjectKeyFromObject(legacy), rs); err != nil {
				return err
			}
			rs.Annotations = map[string]string{replicator.AnnotationOriginNamespace: "x"}
			return tc.Update(ctx, rs)
		}, "has no annotation annex.dev/origin-namespace"},
		{"delete a ResourceSlice it did not write", func(ctx context.Context) error {
			return tc.Delete(ctx, legacy.DeepCopy())
		}, "has no annotation annex.dev/origin-namespace"},
		{"create another Lease", func(ctx context.Context) error {
			return tc.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "annex-agent"}})
		}, "the only Lease a consumer writes is annex-consumer-heartbeat"},
		{"update a Lease that is not its heartbeat", func(ctx context.Context) error {
			return tc.Update(ctx, otherLease.DeepCopy())
		}, forbidden},
		{"request a token for another ServiceAccount", func(ctx context.Context) error {
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "other"}}
			return tc.SubResource("token").Create(ctx, sa, &authenticationv1.TokenRequest{})
		}, forbidden},
		{"grant itself more", func(ctx context.Context) error {
			return tc.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "more"},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}})
		}, forbidden},
		{"write its own status (the provider's answer)", func(ctx context.Context) error {
			rs := &corev1alpha1.ResourceSlice{}
			if err := tc.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: "peering"}, rs); err != nil {
				return err
			}
			rs.Status.Phase = corev1alpha1.ResourceSliceAccepted
			return tc.Status().Update(ctx, rs)
		}, forbidden},

		// And it cleans up as a graceful unpeer does.
		{"replicator deletes its ResourceSlice replica", func(ctx context.Context) error {
			return tc.Delete(ctx, slice(tenantNS, "peering", consumer, consumer, provider, true))
		}, ""},
		{"unpeer releases the heartbeat", func(ctx context.Context) error {
			return tc.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: heartbeat}})
		}, ""},
	}
	for _, st := range steps {
		err := st.do(ctx)
		t.Logf("%s: %v", st.name, err)
		switch {
		case st.want == "" && err != nil:
			t.Errorf("%s: want allowed, got %v", st.name, err)
		case st.want == forbidden && !apierrors.IsForbidden(err):
			t.Errorf("%s: want Forbidden, got %v", st.name, err)
		case st.want != "" && st.want != forbidden && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), st.want) ||
			!strings.Contains(err.Error(), "annex-tenant-namespace: ")):
			t.Errorf("%s: want Invalid from annex-tenant-namespace with %q, got %v", st.name, st.want, err)
		}
	}

	// beta's own objects and the object alpha did not write are untouched.
	for _, obj := range append(own, legacy) {
		got := obj.DeepCopyObject().(client.Object)
		if err := p.Client.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
			t.Errorf("%T %s: %v", obj, client.ObjectKeyFromObject(obj), err)
		} else if got.GetResourceVersion() != obj.GetResourceVersion() {
			t.Errorf("%T %s was changed", obj, client.ObjectKeyFromObject(obj))
		}
	}
}

// tenantClient mints alpha's credential as `annexctl peer` does (a bound
// token of annex-tenant-alpha/annex-consumer in a kubeconfig) and returns a
// client that uses only it.
func tenantClient(ctx context.Context, t *testing.T, p *cli.Cluster) client.Client {
	t.Helper()
	tr, err := p.Clientset.CoreV1().ServiceAccounts(tenantNS).CreateToken(ctx, ConsumerServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca := p.Config.CAData
	if len(ca) == 0 {
		if ca, err = os.ReadFile(p.Config.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	kc, err := Kubeconfig(p.Host, ca, provider, tr.Status.Token)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 10 * time.Second
	scheme, err := agent.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// providerObjects are what beta keeps for alpha as alpha's consumer, as
// `annexctl peer` and offloading make them: [Secret, ResourceSlice,
// RemoteNamespace, VirtualNode], all in annex-peer-alpha.
func providerObjects(t *testing.T) []client.Object {
	t.Helper()
	labels := func() map[string]string {
		return map[string]string{corev1alpha1.LabelRemoteClusterID: consumer, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}
	}
	kc, err := Kubeconfig("https://alpha.invalid:6443", []byte("ca"), consumer, "token")
	if err != nil {
		t.Fatal(err)
	}
	rs := slice(peerNS, ResourceSliceName, consumer, provider, consumer, false)
	rn := remoteNamespace(peerNS, "shop", consumer, false)
	return []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: peerNS, Name: CredentialsSecret, Labels: labels()},
			Data: map[string][]byte{CredentialsKey: kc}},
		rs, rn,
		&corev1alpha1.VirtualNode{ObjectMeta: metav1.ObjectMeta{Namespace: peerNS, Name: consumer, Labels: labels()},
			Spec: corev1alpha1.VirtualNodeSpec{ClusterID: consumer, Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
				CredentialsSecretRef: corev1alpha1.SecretReference{Namespace: peerNS, Name: CredentialsSecret}}},
	}
}

// slice is a ResourceSlice labelled for target; annotated makes it look like
// a replica (annex.dev/origin-namespace).
func slice(ns, name, target, consumerID, providerID string, annotated bool) *corev1alpha1.ResourceSlice {
	rs := &corev1alpha1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			corev1alpha1.LabelRemoteClusterID: target, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}},
		Spec: corev1alpha1.ResourceSliceSpec{ConsumerClusterID: consumerID, ProviderClusterID: providerID,
			Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
	}
	if annotated {
		rs.Annotations = map[string]string{replicator.AnnotationOriginNamespace: corev1alpha1.PeerNamespaceName(providerID)}
	}
	return rs
}

func remoteNamespace(ns, name, target string, annotated bool) *offloadingv1alpha1.RemoteNamespace {
	rn := &offloadingv1alpha1.RemoteNamespace{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			corev1alpha1.LabelRemoteClusterID: target, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex,
			corev1alpha1.LabelSourceNamespace: name}},
		Spec: offloadingv1alpha1.RemoteNamespaceSpec{SourceNamespace: name, RemoteNamespace: fmt.Sprintf("%s-%s", name, target)},
	}
	if annotated {
		rn.Annotations = map[string]string{replicator.AnnotationOriginNamespace: corev1alpha1.PeerNamespaceName(provider)}
	}
	return rn
}
