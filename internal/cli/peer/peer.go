// Package peer owns `annexctl peer`: with admin access to both clusters it
// establishes a peering in which consumer C uses provider P's resources — a
// least-privilege tenant on P, a bound expiring token for C, ForeignClusters
// on both sides, a ResourceSlice that P accepts or denies, and a VirtualNode on
// C for what was granted.
//
// Names and roles are separated. On P, the tenant namespace
// annex-tenant-<C> holds only what C writes there with its credential (and
// C's ServiceAccount, Role and RoleBinding, which C cannot change). On C, the
// peer namespace annex-peer-<P> holds C's own objects for P: the credentials
// Secret, the ResourceSlice, the VirtualNode and (later) the RemoteNamespaces.
// In a two-way peering the four namespaces are distinct, so neither cluster
// can reach what the other keeps for itself.
package peer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/cli/network"
	"github.com/annexhq/annex/internal/grant"
)

// Names shared by the peering's parts.
const (
	ConsumerServiceAccount   = corev1alpha1.ConsumerServiceAccountName
	CredentialsSecret        = corev1alpha1.CredentialsSecretName
	CredentialsKey           = corev1alpha1.CredentialsKubeconfigKey
	AnnotationTokenExpiry    = corev1alpha1.AnnotationTokenExpiry
	AnnotationServiceAccount = corev1alpha1.AnnotationServiceAccount
	LabelTenant              = corev1alpha1.LabelTenant
	// ResourceSliceName is the name of the peering's ResourceSlice on both sides.
	ResourceSliceName = "peering"
)

// Options are the settings of one peering.
type Options struct {
	CPU, Memory, Pods string
	// TokenTTL is the lifetime of the bound token given to the consumer; the
	// consumer's agent renews it before it expires. At least 10 minutes.
	TokenTTL time.Duration
	// NoNetwork skips `network connect` between the two clusters.
	NoNetwork bool
	// RemapPool is where remapped CIDRs come from when the clusters' CIDRs overlap.
	RemapPool string
	// RemoteServer is the provider's API server URL as the consumer's
	// agent reaches it, when that differs from the address in the
	// provider's kubeconfig (an agent in a pod behind a load balancer or
	// NAT, the real-node sandbox); empty: the kubeconfig's.
	RemoteServer string
	Timeout      time.Duration
}

// DefaultOptions are the CLI defaults.
func DefaultOptions() Options {
	return Options{CPU: "4", Memory: "8Gi", Pods: "110", TokenTTL: 24 * time.Hour, RemapPool: network.DefaultOptions().Pool, Timeout: 2 * time.Minute}
}

// Resources parses the requested resources.
func (o Options) Resources() (corev1.ResourceList, error) {
	rl := corev1.ResourceList{}
	for name, v := range map[corev1.ResourceName]string{corev1.ResourceCPU: o.CPU, corev1.ResourceMemory: o.Memory, corev1.ResourcePods: o.Pods} {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("--%s %q: %w", name, v, err)
		}
		if q.Sign() <= 0 {
			return nil, fmt.Errorf("--%s must be positive, got %s", name, v)
		}
		rl[name] = q
	}
	return rl, nil
}

// Validate checks the options that do not need a cluster.
func (o Options) Validate() error {
	if o.TokenTTL < 10*time.Minute {
		return fmt.Errorf("--token-ttl %s: Kubernetes issues tokens of at least 10m", o.TokenTTL)
	}
	if o.RemoteServer != "" {
		u, err := url.Parse(o.RemoteServer)
		if err != nil || u.Scheme != "https" || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.User != nil {
			return fmt.Errorf("--remote-server %q: want the provider API server's https://HOST[:PORT] as the consumer's agent reaches it", o.RemoteServer)
		}
	}
	_, err := o.Resources()
	return err
}

// server is the provider's API server URL written for the consumer's agent.
func (o Options) server(p *cli.Cluster) string {
	if o.RemoteServer != "" {
		return strings.TrimSuffix(o.RemoteServer, "/")
	}
	return p.Host
}

// Run peers consumer c with provider p.
func Run(ctx context.Context, s cli.IOStreams, c, p *cli.Cluster, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cid, pid, err := cli.Identities(ctx, c, p, "consumer", "provider", "peer with")
	if err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "Peering %s (consumer) with %s (provider)\n", cid.ClusterID, pid.ClusterID)
	changed := false
	note := func(ch bool, format string, args ...any) {
		changed = changed || ch
		if ch {
			s.Step(format, args...)
		} else {
			s.Step(format+" (unchanged)", args...)
		}
	}

	// Provider side: the tenant, its identity and its least-privilege Role.
	tenantOnP := corev1alpha1.TenantNamespaceName(cid.ClusterID)
	ch, err := applyAll(ctx, p.Client, TenantObjects(tenantOnP, cid.ClusterID)...)
	if err != nil {
		return fmt.Errorf("provider %s: %w", pid.ClusterID, err)
	}
	note(ch, "provider %s: tenant namespace %s with ServiceAccount %s and its Role", pid.ClusterID, tenantOnP, ConsumerServiceAccount)
	ch, err = applyForeignCluster(ctx, p.Client, cid.ClusterID, "", nil, corev1alpha1.RoleConsumer, tenantOnP)
	if err != nil {
		return fmt.Errorf("provider %s: %w", pid.ClusterID, err)
	}
	note(ch, "provider %s: ForeignCluster %s (role Consumer)", pid.ClusterID, cid.ClusterID)

	// Consumer side: peer namespace, credentials, ForeignCluster.
	peerOnC := corev1alpha1.PeerNamespaceName(pid.ClusterID)
	ch, err = applyAll(ctx, c.Client, PeerNamespace(peerOnC, pid.ClusterID))
	if err != nil {
		return fmt.Errorf("consumer %s: %w", cid.ClusterID, err)
	}
	note(ch, "consumer %s: peer namespace %s", cid.ClusterID, peerOnC)
	server := o.server(p)
	ch, expiry, err := ensureCredentials(ctx, c, p, server, peerOnC, tenantOnP, pid.ClusterID, o.TokenTTL)
	if err != nil {
		return err
	}
	note(ch, "consumer %s: credentials Secret %s/%s (bound token of %s/%s, expires %s, renewed by the agent)", cid.ClusterID, peerOnC, CredentialsSecret, tenantOnP, ConsumerServiceAccount, expiry.Format(time.RFC3339))
	ref := &corev1alpha1.SecretReference{Namespace: peerOnC, Name: CredentialsSecret}
	ch, err = applyForeignCluster(ctx, c.Client, pid.ClusterID, server, ref, corev1alpha1.RoleProvider, peerOnC)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", cid.ClusterID, err)
	}
	note(ch, "consumer %s: ForeignCluster %s (role Provider, %s)", cid.ClusterID, pid.ClusterID, server)

	// Resources: requested on C, replicated to P by C's agent, decided by P's agent.
	want, _ := o.Resources()
	rs := &corev1alpha1.ResourceSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: corev1alpha1.GroupVersion.String(), Kind: "ResourceSlice"},
		ObjectMeta: metav1.ObjectMeta{Name: ResourceSliceName, Namespace: peerOnC, Labels: map[string]string{
			corev1alpha1.LabelRemoteClusterID: pid.ClusterID, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}},
		Spec: corev1alpha1.ResourceSliceSpec{ConsumerClusterID: cid.ClusterID, ProviderClusterID: pid.ClusterID, Resources: want},
	}
	ch, err = cli.ApplyTyped(ctx, c.Client, rs)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", cid.ClusterID, err)
	}
	note(ch, "consumer %s: ResourceSlice %s/%s requests %s", cid.ClusterID, peerOnC, ResourceSliceName, formatResources(want))
	s.Step("waiting for provider %s to accept the ResourceSlice (the agents replicate and decide it)...", pid.ClusterID)
	granted, err := waitDecision(ctx, c.Client, client.ObjectKeyFromObject(rs), want)
	if err != nil {
		return err
	}
	s.Step("provider %s granted %s", pid.ClusterID, formatResources(granted))
	// The grant is the provider's word: never advertise more than was asked.
	granted, problems := grant.Advertise(want, granted)
	for _, p := range problems {
		s.Step("warning: provider %s's ResourceSlice %s %s", pid.ClusterID, p.Field, p.Message)
	}

	vn := &corev1alpha1.VirtualNode{
		TypeMeta: metav1.TypeMeta{APIVersion: corev1alpha1.GroupVersion.String(), Kind: "VirtualNode"},
		ObjectMeta: metav1.ObjectMeta{Name: pid.ClusterID, Namespace: peerOnC, Labels: map[string]string{
			corev1alpha1.LabelRemoteClusterID: pid.ClusterID, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}},
		Spec: corev1alpha1.VirtualNodeSpec{ClusterID: pid.ClusterID, Resources: granted, CredentialsSecretRef: *ref},
	}
	ch, err = cli.ApplyTyped(ctx, c.Client, vn)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", cid.ClusterID, err)
	}
	note(ch, "consumer %s: VirtualNode %s/%s (Node %s)", cid.ClusterID, peerOnC, vn.Name, vn.NodeName())

	if o.NoNetwork {
		s.Step("network link skipped (--no-network)")
	} else {
		ch, err := network.Link(ctx, s, c, p, network.Options{Pool: o.RemapPool, Purpose: networkingv1alpha1.LinkPurposePeering})
		if err != nil {
			return fmt.Errorf("network link: %w", err)
		}
		changed = changed || ch
	}
	if changed {
		fmt.Fprintf(s.Out, "%s now consumes resources of %s.\n", cid.ClusterID, pid.ClusterID)
	} else {
		fmt.Fprintf(s.Out, "%s already consumes resources of %s; nothing changed.\n", cid.ClusterID, pid.ClusterID)
	}
	return nil
}

// TenantNamespace is the namespace a provider keeps for consumer peerID: it
// holds only what that consumer writes there.
func TenantNamespace(name, peerID string) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1alpha1.LabelRemoteClusterID: peerID, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, LabelTenant: "true"}},
	}
}

// PeerNamespace is the namespace a consumer keeps for provider peerID: its
// own objects for that provider, out of every peer's reach. It carries
// neither the tenant label nor annex.dev/remote-cluster-id, so no policy,
// clean-up or controller meant for tenant or remote namespaces matches it.
func PeerNamespace(name, peerID string) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1alpha1.LabelPeer: peerID, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}},
	}
}

// ConsumerRules are everything a consumer may do in its tenant namespace on a
// provider, and each rule is there because a consumer component needs it:
//
//   - resourceslices, remotenamespaces: the consumer's replicator gets,
//     creates, updates and deletes its replicas (it reads the provider's
//     answer in the object's status with the same get; it never lists or
//     watches). Admission policy annex-tenant-namespace further requires
//     that each one says where it comes from and names this consumer.
//   - leases: the heartbeat creates, gets and patches its Lease, and a
//     graceful unpeer deletes it; every verb but create is limited to that
//     name (RBAC cannot limit create by name: the admission policy does).
//   - serviceaccounts/token: the credentials controller renews the token of
//     this ServiceAccount and no other.
//
// Nothing else: no Secrets, ConfigMaps, Services or Events here (those a
// consumer reflects go into its remote namespaces, under ClusterRole
// annex-remote-consumer), and nothing cluster-wide.
func ConsumerRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{corev1alpha1.GroupVersion.Group}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "create", "update", "delete"}},
		{APIGroups: []string{"offloading.annex.dev"}, Resources: []string{"remotenamespaces"}, Verbs: []string{"get", "create", "update", "delete"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{corev1alpha1.HeartbeatLeaseName}, Verbs: []string{"get", "update", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{ConsumerServiceAccount}, Verbs: []string{"create"}},
	}
}

// TenantObjects are the provider's objects for consumer consumerID: its
// tenant namespace ns, and there the ServiceAccount the consumer
// authenticates as, bound to a Role of ConsumerRules.
func TenantObjects(ns, consumerID string) []client.Object {
	labels := map[string]string{corev1alpha1.LabelRemoteClusterID: consumerID, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}
	meta := metav1.ObjectMeta{Name: ConsumerServiceAccount, Namespace: ns, Labels: labels}
	return []client.Object{
		TenantNamespace(ns, consumerID),
		&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta},
		&rbacv1.Role{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"}, ObjectMeta: meta, Rules: ConsumerRules()},
		&rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: meta,
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: ConsumerServiceAccount},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: ConsumerServiceAccount, Namespace: ns}},
		},
	}
}

func applyAll(ctx context.Context, c client.Client, objs ...client.Object) (bool, error) {
	changed := false
	for _, o := range objs {
		ch, err := cli.ApplyTyped(ctx, c, o)
		if err != nil {
			return false, err
		}
		changed = changed || ch
	}
	return changed, nil
}

// applyForeignCluster applies a ForeignCluster and merges role into its status
// (a cluster that is both consumer and provider of the other becomes Both),
// together with the namespace of that role: tenantNamespace for a consumer,
// peerNamespace for a provider.
func applyForeignCluster(ctx context.Context, c client.Client, id, url string, ref *corev1alpha1.SecretReference, role corev1alpha1.PeeringRole, ns string) (bool, error) {
	fc := &corev1alpha1.ForeignCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: corev1alpha1.GroupVersion.String(), Kind: "ForeignCluster"},
		ObjectMeta: metav1.ObjectMeta{Name: id, Labels: map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}},
		Spec:       corev1alpha1.ForeignClusterSpec{ClusterID: id, APIServerURL: url, CredentialsSecretRef: ref},
	}
	existing := &corev1alpha1.ForeignCluster{}
	merged := role
	if err := c.Get(ctx, client.ObjectKey{Name: id}, existing); err == nil {
		if existing.Spec.Unreachable {
			return false, fmt.Errorf("ForeignCluster %s is marked unreachable (forcibly unpeered); run `annexctl unpeer %s --force` to finish removing it first", id, id)
		}
		// Keep what the other direction of a two-way peering set.
		if fc.Spec.APIServerURL == "" {
			fc.Spec.APIServerURL = existing.Spec.APIServerURL
			fc.Spec.CredentialsSecretRef = existing.Spec.CredentialsSecretRef
		}
		if existing.Status.Role != "" && existing.Status.Role != role {
			merged = corev1alpha1.RoleBoth
		}
	}
	changed, err := cli.ApplyTyped(ctx, c, fc)
	if err != nil {
		return false, err
	}
	if err := c.Get(ctx, client.ObjectKey{Name: id}, existing); err != nil {
		return false, err
	}
	field, current := "peerNamespace", existing.Status.PeerNamespace
	if role == corev1alpha1.RoleConsumer {
		field, current = "tenantNamespace", existing.Status.TenantNamespace
	}
	if existing.Status.Role == merged && current == ns {
		return changed, nil
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"role": merged, field: ns}})
	if err := c.Status().Patch(ctx, existing, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return false, fmt.Errorf("set ForeignCluster %s role: %w", id, err)
	}
	return true, nil
}

// ensureCredentials gives C a kubeconfig for P (at server) with a bound
// token of the consumer ServiceAccount. A token that still has more than half its life is
// kept, so that a second run changes nothing.
func ensureCredentials(ctx context.Context, c, p *cli.Cluster, server, peerOnC, tenantOnP, providerID string, ttl time.Duration) (bool, time.Time, error) {
	existing := &corev1.Secret{}
	err := c.Client.Get(ctx, client.ObjectKey{Namespace: peerOnC, Name: CredentialsSecret}, existing)
	if err == nil {
		if exp, perr := time.Parse(time.RFC3339, existing.Annotations[AnnotationTokenExpiry]); perr == nil && time.Until(exp) > ttl/2 &&
			existing.Annotations[AnnotationServiceAccount] == tenantOnP+"/"+ConsumerServiceAccount && sameServer(existing.Data[CredentialsKey], server) {
			return false, exp, nil
		}
	} else if !apierrors.IsNotFound(err) {
		return false, time.Time{}, err
	}
	secs := int64(ttl.Seconds())
	tr, err := p.Clientset.CoreV1().ServiceAccounts(tenantOnP).CreateToken(ctx, ConsumerServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return false, time.Time{}, fmt.Errorf("provider %s: request a token for %s/%s: %w", providerID, tenantOnP, ConsumerServiceAccount, err)
	}
	ca := p.Config.CAData
	if len(ca) == 0 && p.Config.CAFile != "" {
		if ca, err = os.ReadFile(p.Config.CAFile); err != nil {
			return false, time.Time{}, fmt.Errorf("read the provider's CA: %w", err)
		}
	}
	kc, err := Kubeconfig(server, ca, providerID, tr.Status.Token)
	if err != nil {
		return false, time.Time{}, err
	}
	secret := &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: CredentialsSecret, Namespace: peerOnC,
			Labels: map[string]string{corev1alpha1.LabelRemoteClusterID: providerID, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex},
			Annotations: map[string]string{
				AnnotationTokenExpiry:    tr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339),
				AnnotationServiceAccount: tenantOnP + "/" + ConsumerServiceAccount,
			}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{CredentialsKey: kc},
	}
	if _, err := cli.ApplyTyped(ctx, c.Client, secret); err != nil {
		return false, time.Time{}, err
	}
	return true, tr.Status.ExpirationTimestamp.Time, nil
}

// Kubeconfig renders a kubeconfig for server with a bearer token.
func Kubeconfig(server string, ca []byte, name, token string) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	return clientcmd.Write(*kc)
}

func sameServer(kubeconfig []byte, host string) bool {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return false
	}
	for _, cl := range cfg.Clusters {
		return cl.Server == host
	}
	return false
}

// waitDecision waits until the provider has accepted or denied the slice.
func waitDecision(ctx context.Context, c client.Client, key client.ObjectKey, want corev1.ResourceList) (corev1.ResourceList, error) {
	var rs corev1alpha1.ResourceSlice
	var denied error
	err := cli.Poll(ctx, 250*time.Millisecond, 60*time.Second, "the provider to decide on ResourceSlice "+key.String()+" (is the agent running on both clusters?)", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, &rs); err != nil {
			return false, err
		}
		// Only a decision on the current spec counts.
		if cond := meta.FindStatusCondition(rs.Status.Conditions, corev1alpha1.ConditionAccepted); cond == nil || cond.ObservedGeneration != rs.Generation {
			return false, nil
		}
		switch rs.Status.Phase {
		case corev1alpha1.ResourceSliceAccepted:
			return true, nil
		case corev1alpha1.ResourceSliceDenied:
			reason := "no reason given"
			for _, cond := range rs.Status.Conditions {
				if cond.Type == corev1alpha1.ConditionAccepted {
					reason = cond.Reason + ": " + cond.Message
				}
			}
			denied = fmt.Errorf("the provider denied the requested resources (%s): %s; ask for less with --cpu/--memory/--pods and run peer again", formatResources(want), reason)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	if denied != nil {
		return nil, denied
	}
	return rs.Status.Resources, nil
}

func formatResources(rl corev1.ResourceList) string {
	var parts []string
	for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
		if q, ok := rl[n]; ok {
			parts = append(parts, string(n)+"="+q.String())
		}
	}
	return strings.Join(parts, ", ")
}
