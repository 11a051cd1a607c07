package unpeer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/localcluster/clustertest"
)

// errKilled is what a write returns once the unpeer is "killed".
var errKilled = errors.New("killed")

// killer fails every write after the first budget ones, across clusters:
// an unpeer stopped there.
type killer struct {
	budget int
	writes []string
}

func (k *killer) write(what string) error {
	if len(k.writes) >= k.budget {
		return errKilled
	}
	k.writes = append(k.writes, what)
	return nil
}

// funcs are the interceptors of a cluster's client that count its writes.
func (k *killer) funcs(cluster string) interceptor.Funcs {
	name := func(o client.Object) string {
		return fmt.Sprintf("%s: %T %s", cluster, o, client.ObjectKeyFromObject(o))
	}
	return interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), o.DeepCopyObject().(client.Object)); apierrors.IsNotFound(err) {
				return err // nothing to delete: not a write
			}
			if err := k.write("delete " + name(o)); err != nil {
				return err
			}
			return c.Delete(ctx, o, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			if err := k.write("patch " + name(o)); err != nil {
				return err
			}
			return c.Patch(ctx, o, p, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := k.write("patch " + sub + " " + name(o)); err != nil {
				return err
			}
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
	}
}

// identityOf is a cluster's identity ConfigMap.
func identityOf(id string) client.Object {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.AgentNamespace, Name: corev1alpha1.ClusterIdentityConfigMapName},
		Data: map[string]string{corev1alpha1.ClusterIdentityKeyClusterID: id}}
}

// link is a cluster's NetworkConfiguration with peer, made for the peering.
func link(peer string) client.Object {
	return &networkingv1alpha1.NetworkConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.AgentNamespace, Name: peer,
		Labels: map[string]string{networkingv1alpha1.LabelLinkPurpose: networkingv1alpha1.LinkPurposePeering}},
		Spec: networkingv1alpha1.NetworkConfigurationSpec{RemoteClusterID: peer}}
}

func namespace(name string, labels map[string]string) client.Object {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// roles are the roles of alpha's ForeignCluster for beta and of beta's for
// alpha.
type roles struct{ onAlpha, onBeta corev1alpha1.PeeringRole }

// peerings are the peerings an unpeer may find: one way, both ways, and
// both ways on one side only (what a stopped unpeer of the other direction
// may leave).
var peerings = []roles{
	{corev1alpha1.RoleProvider, corev1alpha1.RoleConsumer},
	{corev1alpha1.RoleBoth, corev1alpha1.RoleBoth},
	{corev1alpha1.RoleBoth, corev1alpha1.RoleConsumer},
	{corev1alpha1.RoleProvider, corev1alpha1.RoleBoth},
}

// world is consumer alpha peered with provider beta, as `annexctl peer`
// leaves them, with the ForeignClusters' roles r; its clients stop writing
// after k's budget.
func world(t *testing.T, k *killer, r roles) (alpha, beta *cli.Cluster) {
	t.Helper()
	onAlpha, onBeta := r.onAlpha, r.onBeta
	peerNS := corev1alpha1.PeerNamespaceName("beta")
	alphaObjs := []client.Object{identityOf("alpha"), link("beta"),
		&corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "beta"}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "beta",
			CredentialsSecretRef: &corev1alpha1.SecretReference{Namespace: peerNS, Name: corev1alpha1.CredentialsSecretName}},
			Status: corev1alpha1.ForeignClusterStatus{Role: onAlpha, PeerNamespace: peerNS}},
		namespace(peerNS, map[string]string{corev1alpha1.LabelPeer: "beta", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: peerNS, Name: corev1alpha1.CredentialsSecretName},
			Data: map[string][]byte{corev1alpha1.CredentialsKubeconfigKey: []byte("not a kubeconfig: the provider does not answer")}},
		&corev1alpha1.VirtualNode{ObjectMeta: metav1.ObjectMeta{Namespace: peerNS, Name: "beta"}, Spec: corev1alpha1.VirtualNodeSpec{ClusterID: "beta"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: corev1alpha1.VirtualNodeName("beta")}},
		&corev1alpha1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Namespace: peerNS, Name: "peering"}},
		&offloadingv1alpha1.RemoteNamespace{ObjectMeta: metav1.ObjectMeta{Namespace: peerNS, Name: "shop"}},
	}
	tenantLabels := map[string]string{corev1alpha1.LabelRemoteClusterID: "alpha", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}
	betaObjs := []client.Object{identityOf("beta"), link("alpha"),
		&corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "alpha"},
			Status: corev1alpha1.ForeignClusterStatus{Role: onBeta, TenantNamespace: corev1alpha1.TenantNamespaceName("alpha")}},
		namespace(corev1alpha1.TenantNamespaceName("alpha"), map[string]string{corev1alpha1.LabelRemoteClusterID: "alpha",
			corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelTenant: "true"}),
		namespace("shop-alpha", tenantLabels),
	}
	build := func(name string, objs []client.Object) *cli.Cluster {
		c := fake.NewClientBuilder().WithScheme(clustertest.Scheme(t)).WithObjects(objs...).
			WithStatusSubresource(&corev1alpha1.ForeignCluster{}).
			WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
			WithInterceptorFuncs(k.funcs(name)).Build()
		return &cli.Cluster{Client: c, Host: "https://" + name}
	}
	return build("alpha", alphaObjs), build("beta", betaObjs)
}

// checkAccessFirst fails t when cl holds a state no unpeer may leave, even
// stopped: a network link with peer without the ForeignCluster it was made
// for (a gateway would open it to every tenant), or the ForeignCluster gone
// while the peering's credentials are left (the tenant's namespace on a
// provider, the kubeconfig Secret on a consumer).
func checkAccessFirst(t *testing.T, cl *cli.Cluster, side, peer string, credentials client.Object) {
	t.Helper()
	ctx := context.Background()
	exists := func(o client.Object) bool {
		err := cl.Client.Get(ctx, client.ObjectKeyFromObject(o), o)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	fc := exists(&corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: peer}})
	if exists(link(peer)) && !fc {
		t.Errorf("%s: the network link with %s is left without its ForeignCluster", side, peer)
	}
	if exists(credentials) && !fc {
		t.Errorf("%s: %T %s is left without the ForeignCluster", side, credentials, client.ObjectKeyFromObject(credentials))
	}
}

// TestRunStoppedAtEveryStep stops `unpeer --remote-kubeconfig` after each
// of its writes in turn, both clusters' together, and checks that no stop
// leaves a link without its peering or a peering without its credentials
// going first; run to the end, nothing of the peering is left (a two-way
// peering keeps the link and the ForeignClusters, with the role left; one
// that only one side calls two-way loses the link).
func TestRunStoppedAtEveryStep(t *testing.T) {
	for _, r := range peerings {
		t.Run(fmt.Sprintf("alpha %s, beta %s", r.onAlpha, r.onBeta), func(t *testing.T) {
			for budget := 0; ; budget++ {
				k := &killer{budget: budget}
				alpha, beta := world(t, k, r)
				err := Run(context.Background(), cli.IOStreams{Out: io.Discard}, alpha, beta, Options{Timeout: 5 * time.Second})
				checkAccessFirst(t, beta, "provider beta", "alpha", namespace(corev1alpha1.TenantNamespaceName("alpha"), nil))
				checkAccessFirst(t, alpha, "consumer alpha", "beta",
					&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.PeerNamespaceName("beta"), Name: corev1alpha1.CredentialsSecretName}})
				if t.Failed() {
					t.Fatalf("stopped after %d writes: %s", budget, strings.Join(k.writes, "; "))
				}
				if err == nil {
					if len(k.writes) > 0 && r != peerings[1] && !strings.Contains(k.writes[0], "NetworkConfiguration") {
						t.Errorf("first write %q, want the network link", k.writes[0])
					}
					break
				}
				if !errors.Is(err, errKilled) {
					t.Fatalf("stopped after %d writes: %v", budget, err)
				}
			}
		})
	}
}

// TestRunLocalForcedStoppedAtEveryStep does the same for `unpeer --force`
// with a provider that does not answer: the consumer's side only.
func TestRunLocalForcedStoppedAtEveryStep(t *testing.T) {
	for _, r := range peerings {
		t.Run(fmt.Sprintf("alpha %s, beta %s", r.onAlpha, r.onBeta), func(t *testing.T) {
			for budget := 0; ; budget++ {
				k := &killer{budget: budget}
				alpha, _ := world(t, k, r)
				err := RunLocal(context.Background(), cli.IOStreams{Out: io.Discard}, alpha, "beta",
					LocalOptions{Force: true, GracefulTimeout: time.Second, Timeout: 5 * time.Second})
				checkAccessFirst(t, alpha, "consumer alpha", "beta",
					&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.PeerNamespaceName("beta"), Name: corev1alpha1.CredentialsSecretName}})
				if t.Failed() {
					t.Fatalf("stopped after %d writes: %s", budget, strings.Join(k.writes, "; "))
				}
				if err == nil {
					break
				}
				if !errors.Is(err, errKilled) {
					t.Fatalf("stopped after %d writes: %v", budget, err)
				}
			}
		})
	}
}
