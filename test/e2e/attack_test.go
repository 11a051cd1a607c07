package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/remotenamespace"
	"github.com/annexhq/annex/internal/localcluster"
)

// tenantClient returns a client for provider that holds exactly the
// credential consumer's agent uses there: the kubeconfig Secret its
// ForeignCluster for provider points at.
func tenantClient(t *testing.T, consumer client.Client, providerID string) client.Client {
	t.Helper()
	ctx := context.Background()
	fc := &corev1alpha1.ForeignCluster{}
	if err := consumer.Get(ctx, client.ObjectKey{Name: providerID}, fc); err != nil {
		t.Fatal(err)
	}
	if fc.Spec.CredentialsSecretRef == nil {
		t.Fatalf("ForeignCluster %s has no credentials", providerID)
	}
	ref := fc.Spec.CredentialsSecretRef
	secret := &corev1.Secret{}
	if err := consumer.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, secret); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[corev1alpha1.CredentialsKubeconfigKey])
	if err != nil {
		t.Fatal(err)
	}
	return clientFor(t, cfg)
}

// refused reports nil when err is the API server refusing a request
// (422 Invalid from an admission policy or the schema, 403 Forbidden from
// RBAC, Pod Security or a quota) and wantText, when set, is in its message.
func refused(err error, wantText string) error {
	switch {
	case err == nil:
		return errors.New("accepted")
	case !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err):
		return fmt.Errorf("not a refusal: %w", err)
	case wantText != "" && !strings.Contains(err.Error(), wantText):
		return fmt.Errorf("refused, but the message does not say %q: %w", wantText, err)
	}
	return nil
}

// shadowPod is a ShadowPod in ns whose pod is one container with requests.
func shadowPod(ns, name string, mutate func(*corev1.PodSpec)) *offloadingv1alpha1.ShadowPod {
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}}}}}
	if mutate != nil {
		mutate(&spec)
	}
	return &offloadingv1alpha1.ShadowPod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: offloadingv1alpha1.ShadowPodSpec{Pod: spec}}
}

// shadowPodOutcome waits until the provider decided on the ShadowPod key:
// nil when it was refused (status Failed with reason), an error when its
// pod was created or nothing was decided in time.
func shadowPodRefused(ctx context.Context, admin client.Client, key client.ObjectKey, reason string) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		sp := &offloadingv1alpha1.ShadowPod{}
		if err := admin.Get(ctx, key, sp); err != nil {
			return err
		}
		if err := admin.Get(ctx, key, &corev1.Pod{}); err == nil {
			return fmt.Errorf("its pod was created (status %s %s)", sp.Status.Reason, sp.Status.Message)
		}
		if sp.Status.Phase == corev1.PodFailed {
			if reason != "" && sp.Status.Reason != reason {
				return fmt.Errorf("refused with reason %s (%s), want %s", sp.Status.Reason, sp.Status.Message, reason)
			}
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return errors.New("neither refused nor run after 20s")
}

// TestHostileConsumer: with exactly the credential a real peering gives
// alpha on beta, try what docs/security.md says a tenant may not do, and
// check each attempt is refused or neutralised while beta's own workloads
// and another tenant's are untouched.
func TestHostileConsumer(t *testing.T) {
	alpha, beta := env.clusters[0], env.clusters[1]
	ctx := context.Background()
	alphaAgent := installAndRunAgent(t, alpha, "alpha")
	// A small budget of Secrets, so that an attack spends it in seconds.
	betaAgent := installAndRunAgent(t, beta, "beta", fmt.Sprintf("--tenant-object-budget=configmaps=250,secrets=%d,services=100", attackSecretBudget))
	peer(t, alpha, beta)
	t.Cleanup(func() {
		if out, err := annexctl(t, "unpeer", "--kubeconfig", alpha.KubeconfigPath(), "--remote-kubeconfig", beta.KubeconfigPath()); err != nil {
			t.Errorf("unpeer: %v\n%s", err, out)
		}
	})
	ca, cb := crClient(t, alpha), crClient(t, beta)
	if err := ca.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "attack"}}); err != nil {
		t.Fatal(err)
	}
	if out, err := annexctl(t, "offload", "namespace", "attack", "--kubeconfig", alpha.KubeconfigPath(), "--pod-strategy", "Remote"); err != nil {
		t.Fatalf("offload: %v\n%s", err, out)
	}
	// A second remote namespace, to spread a budget over.
	if err := ca.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "attack2"}}); err != nil {
		t.Fatal(err)
	}
	if out, err := annexctl(t, "offload", "namespace", "attack2", "--kubeconfig", alpha.KubeconfigPath(), "--pod-strategy", "Remote"); err != nil {
		t.Fatalf("offload: %v\n%s", err, out)
	}
	const remoteNS, remoteNS2 = "attack-alpha", "attack2-alpha"
	eventually(t, 30*time.Second, "remote namespaces "+remoteNS+" and "+remoteNS2, func() error {
		return errors.Join(cb.Get(ctx, client.ObjectKey{Name: remoteNS}, &corev1.Namespace{}),
			cb.Get(ctx, client.ObjectKey{Name: remoteNS2}, &corev1.Namespace{}))
	})
	tenant := tenantClient(t, ca, "beta")
	tenantNS := corev1alpha1.TenantNamespaceName("alpha")
	// A hostile consumer runs no agent: alpha's would delete the
	// ShadowPods it does not know, and so hide a provider that lets them
	// run. It is started again for the unpeering.
	alphaAgent.kill(t)
	defer alphaAgent.start(t)

	// The provider's own workload and another tenant's: they must come
	// through untouched.
	own, other := providerBystanders(t, beta, cb)

	var nodeIP string
	nodes := &corev1.NodeList{}
	if err := cb.List(ctx, nodes); err != nil || len(nodes.Items) == 0 {
		t.Fatalf("beta's nodes: %v", err)
	}
	for _, a := range nodes.Items[0].Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}

	type attempt struct {
		name string
		try  func() error // nil when the attack was refused or neutralised
	}
	svc := func(name string, mutate func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: remoteNS, Name: name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(80)}}}}
		mutate(s)
		return s
	}
	createRefused := func(o client.Object, text string) func() error {
		return func() error { return refused(tenant.Create(ctx, o), text) }
	}
	spRefused := func(name string, mutate func(*corev1.PodSpec)) func() error {
		return func() error {
			sp := shadowPod(remoteNS, name, mutate)
			if err := tenant.Create(ctx, sp); err != nil {
				return refused(err, "") // refused at the door
			}
			return shadowPodRefused(ctx, cb, client.ObjectKeyFromObject(sp), "")
		}
	}
	attempts := []attempt{
		// Services that point anywhere.
		{"Service of type NodePort", createRefused(svc("np", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }), "")},
		{"Service of type LoadBalancer", createRefused(svc("lb", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer }), "")},
		{"Service with externalIPs", createRefused(svc("eip", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"203.0.113.7"} }), "")},
		{"Service of type ExternalName", createRefused(svc("en", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeExternalName
			s.Spec.ExternalName = "kubernetes.default.svc"
			s.Spec.Ports = nil
		}), "")},
		{"Service with a load-balancer annotation, a label that hides it from kube-proxy, an external-dns name", func() error {
			return objectKeysRemoved(ctx, tenant, cb, remoteNS, "Service")
		}},
		{"ConfigMap with labels and annotations the provider's controllers act on", func() error {
			return objectKeysRemoved(ctx, tenant, cb, remoteNS, "ConfigMap")
		}},
		{"Secret with labels and annotations the provider's controllers act on", func() error {
			return objectKeysRemoved(ctx, tenant, cb, remoteNS, "Secret")
		}},
		{"a Secret the token controller would fill with a provider's ServiceAccount token", func() error {
			return tokenSecretRefused(ctx, tenant, remoteNS)
		}},
		{"Service that picks its own cluster IP", func() error {
			return clusterIPNotChosen(ctx, tenant, cb, remoteNS, beta.ServiceCIDR())
		}},
		{"endpoints at the provider's node, its own pod, another tenant's pod and the metadata service", func() error {
			return endpointsConfined(ctx, t, tenant, cb, remoteNS, []string{nodeIP, own.Status.PodIP, other.Status.PodIP, "169.254.169.254", "127.0.0.1"})
		}},

		// Placement and priority.
		{"toleration of every taint", spRefused("tolerate-all", func(p *corev1.PodSpec) {
			p.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		})},
		{"toleration of the control plane's taint", spRefused("tolerate-cp", func(p *corev1.PodSpec) {
			p.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists}}
		})},
		{"nodeSelector on a provider's own node label", spRefused("node-selector", func(p *corev1.PodSpec) {
			p.NodeSelector = map[string]string{"node-role.kubernetes.io/control-plane": ""}
		})},
		{"node affinity to a named node", spRefused("node-affinity", func(p *corev1.PodSpec) {
			p.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"x"}}}}}}}}
		})},
		{"priorityClassName system-node-critical", spRefused("priority", func(p *corev1.PodSpec) { p.PriorityClassName = "system-node-critical" })},
		{"schedulerName of another scheduler", spRefused("scheduler", func(p *corev1.PodSpec) { p.SchedulerName = "my-scheduler" })},
		{"runtimeClassName of the provider's own RuntimeClass", func() error {
			rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "kata"}, Handler: "kata"}
			if err := cb.Create(ctx, rc); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			defer func() { _ = cb.Delete(context.Background(), rc) }()
			return spRefused("runtime", func(p *corev1.PodSpec) { p.RuntimeClassName = ptr.To("kata") })()
		}},
		{"pod affinity across namespaces", spRefused("cross-ns-affinity", func(p *corev1.PodSpec) {
			p.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: "kubernetes.io/hostname", NamespaceSelector: &metav1.LabelSelector{},
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}}}}}
		})},
		{"probe against the metadata service", spRefused("probe-host", func(p *corev1.PodSpec) {
			p.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Host: "169.254.169.254", Path: "/latest/meta-data/", Port: intstr.FromInt(80)}}}
		})},
		{"preStop hook against a node-local address", spRefused("hook-host", func(p *corev1.PodSpec) {
			p.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{
				Host: "127.0.0.1", Port: intstr.FromInt(10250)}}}
		})},
		{"privileged container", spRefused("privileged", func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		})},
		{"labels and annotations other controllers act on", func() error { return metadataConfined(ctx, tenant, cb, remoteNS) }},
		{"a claim of a device through dynamic resource allocation", spRefused("dra", func(p *corev1.PodSpec) {
			p.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu")}}
		})},
		{"hostPath volume", spRefused("hostpath", func(p *corev1.PodSpec) {
			p.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		})},

		// Quota.
		{"a GPU the grant does not name", spRefused("gpu", func(p *corev1.PodSpec) {
			p.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
		})},
		{"ephemeral storage the grant does not name", spRefused("ephemeral", func(p *corev1.PodSpec) {
			p.Containers[0].Resources.Requests[corev1.ResourceEphemeralStorage] = resource.MustParse("100Gi")
		})},
		{"more CPU than granted", spRefused("too-big", func(p *corev1.PodSpec) {
			p.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("9")
		})},
		{"lowering requests after admission", func() error { return requestsImmutable(ctx, tenant, cb, remoteNS) }},
		{"orphaning a pod to run it uncounted", func() error { return orphanRemoved(ctx, tenant, cb, remoteNS) }},
		{"a second ResourceSlice for the provider's whole capacity again", func() error {
			var cpu resource.Quantity
			for _, n := range nodes.Items {
				cpu.Add(n.Status.Allocatable[corev1.ResourceCPU])
			}
			return secondSliceDenied(ctx, tenant, cb, tenantNS, cpu)
		}},

		// The grant, attacked without the consumer's agent.
		{"ShadowPods that each fit the grant, together twice over it", func() error {
			return burstOverGrant(ctx, tenant, cb, remoteNS, "burst", 4)
		}},
		{"the same right after the provider's agent restarted", func() error {
			betaAgent.kill(t)
			betaAgent.start(t)
			return burstOverGrant(ctx, tenant, cb, remoteNS, "restarted", 4)
		}},
		{"a ShadowPod with a negative CPU request", spRefused("negative-cpu", func(p *corev1.PodSpec) {
			p.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("-8")
		})},
		{"a ShadowPod with a negative memory limit", spRefused("negative-memory", func(p *corev1.PodSpec) {
			p.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("-1Gi")}
		})},
		{"a ShadowPod whose init container requests 2P CPU", spRefused("huge-init", func(p *corev1.PodSpec) {
			p.InitContainers = []corev1.Container{{Name: "i", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2P")}}}}
		})},
		{"a ShadowPod that sets its own overhead", spRefused("overhead", func(p *corev1.PodSpec) {
			p.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")}
		})},
		{"a ShadowPod whose negative request is counted before the burst", func() error {
			// Refused at the door; were it counted, the burst after it
			// would fit in room that does not exist.
			if err := spRefused("negative-first", func(p *corev1.PodSpec) {
				p.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("-100")
			})(); err != nil {
				return err
			}
			return burstOverGrant(ctx, tenant, cb, remoteNS, "after-negative", 4)
		}},
		{"a ResourceSlice with a negative CPU quantity", func() error {
			return negativeSliceRefused(ctx, tenant, tenantNS, "negative", "-100")
		}},
		{"a ResourceSlice for 2P CPU", func() error {
			return negativeSliceRefused(ctx, tenant, tenantNS, "huge", "2P")
		}},

		// Volumes that the node mounts from the network or that the
		// provider would provision.
		{"a persistentVolumeClaim volume", spRefused("pvc", func(p *corev1.PodSpec) {
			p.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
		})},
		{"an ephemeral volume the provider would provision", spRefused("ephemeral-volume", func(p *corev1.PodSpec) {
			p.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
				VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceStorage: resource.MustParse("100Gi")}}}}}}}}
		})},
		{"an NFS volume mounted by the node", spRefused("nfs", func(p *corev1.PodSpec) {
			p.Volumes = []corev1.Volume{{Name: "nfs", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{
				Server: "169.254.169.254", Path: "/"}}}}
		})},
		{"an iSCSI volume", spRefused("iscsi", func(p *corev1.PodSpec) {
			p.Volumes = []corev1.Volume{{Name: "disk", VolumeSource: corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{
				TargetPortal: "10.0.0.1:3260", IQN: "iqn.2001-04.com.example:storage", Lun: 0}}}}
		})},
		{"a CSI inline volume", spRefused("csi", func(p *corev1.PodSpec) {
			p.Volumes = []corev1.Volume{{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "secrets-store.csi.k8s.io"}}}}
		})},

		// Storage: sizes and counts.
		{"a ConfigMap of 1 MiB", func() error { return configMapOfOneMiBRefused(ctx, tenant, remoteNS) }},
		{"a Secret over the bound", func() error { return secretOverTheBoundRefused(ctx, tenant, remoteNS) }},
		{"annotations over the bound on a Service", func() error { return annotationsOverTheBoundRefused(ctx, tenant, remoteNS) }},
		{"an Event flood", func() error { return eventsRefused(ctx, tenant, cb, remoteNS) }},
		{"Secrets spread over two remote namespaces past the tenant's budget", func() error {
			return secretsPastTheBudgetRefused(ctx, tenant, cb, remoteNS, remoteNS2)
		}},

		// The heartbeat Lease is judged on the provider's clock.
		{"heartbeat renewTime a year ahead, leaseDurationSeconds of ten years, another holderIdentity, annotations saying no fence", func() error {
			return heartbeatFromTheFuture(ctx, tenant, cb, tenantNS)
		}},

		// Namespace squatting and the tenant namespace.
		{"a remote namespace named like the provider's own (EnforceSameName)", func() error {
			return remoteNamespaceRefused(ctx, tenant, cb, tenantNS, "monitoring", "monitoring")
		}},
		{"a remote namespace named like another tenant's", func() error {
			return remoteNamespaceRefused(ctx, tenant, cb, tenantNS, "shop-gamma", "shop-gamma")
		}},
		{"a ResourceSlice for a third cluster, not marked as a replica (confused deputy)", func() error {
			rs := &corev1alpha1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "deputy",
				Labels: map[string]string{corev1alpha1.LabelRemoteClusterID: "gamma"}},
				Spec: corev1alpha1.ResourceSliceSpec{ConsumerClusterID: "beta", ProviderClusterID: "gamma",
					Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}
			return refused(tenant.Create(ctx, rs), "")
		}},
		{"reading Secrets in its tenant namespace", func() error {
			return refused(tenant.List(ctx, &corev1.SecretList{}, client.InNamespace(tenantNS)), "")
		}},
		{"pods directly in its remote namespace", func() error {
			return refused(tenant.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: remoteNS, Name: "direct"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}), "")
		}},
		{"a ResourceQuota of its own", func() error {
			return refused(tenant.Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: remoteNS, Name: "mine"}}), "")
		}},
		{"a NetworkPolicy of its own that lets every packet in and out", func() error {
			all := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: remoteNS, Name: "allow-all"},
				Spec: networkingv1.NetworkPolicySpec{
					PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
					Ingress:     []networkingv1.NetworkPolicyIngressRule{{}}, Egress: []networkingv1.NetworkPolicyEgressRule{{}}}}
			return refused(tenant.Create(ctx, all), "")
		}},
		{"deleting the NetworkPolicy that isolates its remote namespace", func() error {
			if err := cb.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: remotenamespace.NetworkPolicyName}, &networkingv1.NetworkPolicy{}); err != nil {
				return fmt.Errorf("the remote namespace has no NetworkPolicy to attack: %w", err)
			}
			return refused(tenant.Delete(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: remoteNS, Name: remotenamespace.NetworkPolicyName}}), "")
		}},
		{"deleting the quota of its remote namespace", func() error {
			return refused(tenant.Delete(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: remoteNS, Name: "annex-tenant-quota"}}), "")
		}},
		{"relabelling its remote namespace out of Pod Security", func() error {
			ns := &corev1.Namespace{}
			ns.Name = remoteNS
			return refused(tenant.Patch(ctx, ns, client.RawPatch("application/merge-patch+json",
				[]byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"privileged"}}}`))), "")
		}},

		// Teardown (last: it ends the peering on beta).
		{"unpeer stopped after the provider's ForeignCluster went: the link accepts no more than the tenant had, and the provider removes it", func() error {
			return linkWithoutPeeringClosed(ctx, t, betaAgent, cb, "alpha", []string{own.Status.PodIP, other.Status.PodIP})
		}},
	}
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			if err := a.try(); err != nil {
				t.Errorf("not refused: %v", err)
			}
		})
	}
	if len(attempts) < 60 {
		t.Errorf("only %d attempts", len(attempts))
	}

	// The bystanders.
	for _, p := range []*corev1.Pod{own, other} {
		now := &corev1.Pod{}
		if err := cb.Get(ctx, client.ObjectKeyFromObject(p), now); err != nil {
			t.Errorf("pod %s/%s: %v", p.Namespace, p.Name, err)
			continue
		}
		if now.UID != p.UID || now.Status.Phase != corev1.PodRunning || now.DeletionTimestamp != nil {
			t.Errorf("pod %s/%s was touched: uid %s→%s, phase %s, deleting %v", p.Namespace, p.Name, p.UID, now.UID, now.Status.Phase, now.DeletionTimestamp)
		}
	}
}

// providerBystanders starts, on the provider, a pod of its own (namespace
// provider-own) and one of another tenant (a namespace labelled as a remote
// namespace of cluster "someone-else") and returns them Running.
func providerBystanders(t *testing.T, c *localcluster.Cluster, cl client.Client) (own, other *corev1.Pod) {
	t.Helper()
	mk := func(ns string, labels map[string]string) *corev1.Pod {
		return runningPod(t, cl, labels, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bystander"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}, 30*time.Second)
	}
	own = mk("provider-own", nil)
	other = mk("shop-someone-else", map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelRemoteClusterID: "someone-else"})
	_ = c
	return own, other
}

// runningPod creates p's namespace with labels (unless it exists; deleted
// at cleanup) and p, and returns p once it is Running with an IP, waiting
// at most timeout.
func runningPod(t *testing.T, cl client.Client, labels map[string]string, p *corev1.Pod, timeout time.Duration) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	ns := p.Namespace
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	if err := cl.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, timeout, "pod "+ns+"/"+p.Name+" Running with an IP", func() error {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("phase %s ip %q", p.Status.Phase, p.Status.PodIP)
		}
		return nil
	})
	return p
}

// endpointsConfined writes a ShadowEndpointSlice holding addresses the
// tenant does not own next to one it does (its own pod CIDR as beta maps
// it) and checks that the real EndpointSlice holds only the latter.
func endpointsConfined(ctx context.Context, t *testing.T, tenant, admin client.Client, ns string, forbidden []string) error {
	legit := "10.200.3.4" // alpha's pod CIDR; beta does not remap it
	var eps []discoveryv1.Endpoint
	for _, a := range append([]string{legit}, forbidden...) {
		if a == "" {
			continue
		}
		eps = append(eps, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	if err := tenant.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pointing"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}); err != nil {
		return fmt.Errorf("the Service itself: %w", err)
	}
	ses := &offloadingv1alpha1.ShadowEndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pointing"},
		Spec: offloadingv1alpha1.ShadowEndpointSliceSpec{Template: offloadingv1alpha1.EndpointSliceTemplate{
			Labels:      map[string]string{discoveryv1.LabelServiceName: "pointing"},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps,
			Ports: []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}}}}}
	if err := tenant.Create(ctx, ses); err != nil {
		return refused(err, "")
	}
	deadline := time.Now().Add(20 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		list := &discoveryv1.EndpointSliceList{}
		if err := admin.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: "pointing"}); err != nil {
			return err
		}
		var got []string
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				got = append(got, e.Addresses...)
			}
		}
		last = strings.Join(got, ",")
		for _, f := range forbidden {
			if f != "" && strings.Contains(","+last+",", ","+f+",") {
				return fmt.Errorf("the provider's EndpointSlice holds %s (%s)", f, last)
			}
		}
		if last == legit {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the provider's EndpointSlice holds %q, want only %s", last, legit)
}

// requestsImmutable: an admitted ShadowPod's pod spec cannot be changed to
// lower (or raise) what it counts for.
func requestsImmutable(ctx context.Context, tenant, admin client.Client, ns string) error {
	sp := shadowPod(ns, "shrinking", nil)
	if err := tenant.Create(ctx, sp); err != nil {
		return fmt.Errorf("an ordinary ShadowPod: %w", err)
	}
	if err := waitPod(ctx, admin, client.ObjectKeyFromObject(sp)); err != nil {
		return err
	}
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(sp), sp); err != nil {
		return err
	}
	sp.Spec.Pod.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1m")
	if err := refused(tenant.Update(ctx, sp), ""); err != nil {
		return fmt.Errorf("changing spec.pod: %w", err)
	}
	sp.Spec.PodLabels = map[string]string{"tier": "web"}
	sp.Spec.Pod.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("10m")
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(sp), sp); err != nil {
		return err
	}
	sp.Spec.PodLabels = map[string]string{"tier": "web"}
	if err := tenant.Update(ctx, sp); err != nil {
		return fmt.Errorf("a label change must still pass: %w", err)
	}
	return nil
}

// orphanRemoved: a ShadowPod deleted with propagationPolicy Orphan does not
// leave its pod running uncounted.
func orphanRemoved(ctx context.Context, tenant, admin client.Client, ns string) error {
	sp := shadowPod(ns, "orphan", nil)
	if err := tenant.Create(ctx, sp); err != nil {
		return fmt.Errorf("an ordinary ShadowPod: %w", err)
	}
	if err := waitPod(ctx, admin, client.ObjectKeyFromObject(sp)); err != nil {
		return err
	}
	if err := tenant.Delete(ctx, sp, client.PropagationPolicy(metav1.DeletePropagationOrphan)); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		p := &corev1.Pod{}
		err := admin.Get(ctx, client.ObjectKeyFromObject(sp), p)
		if apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil) {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return errors.New("the orphaned pod still runs after 30s")
}

// secondSliceDenied: a tenant's second ResourceSlice asking for the
// provider's whole CPU again is denied (the sum of its slices never exceeds
// the offer).
func secondSliceDenied(ctx context.Context, tenant, admin client.Client, ns string, cpu resource.Quantity) error {
	rs := &corev1alpha1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "greedy",
		Labels:      map[string]string{corev1alpha1.LabelRemoteClusterID: "alpha"},
		Annotations: map[string]string{"annex.dev/origin-namespace": "annex-tenant-beta"}},
		Spec: corev1alpha1.ResourceSliceSpec{ConsumerClusterID: "alpha", ProviderClusterID: "beta",
			Resources: corev1.ResourceList{corev1.ResourceCPU: cpu}}}
	if err := tenant.Create(ctx, rs); err != nil {
		return refused(err, "")
	}
	defer func() { _ = admin.Delete(context.Background(), rs) }()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if err := admin.Get(ctx, client.ObjectKeyFromObject(rs), rs); err != nil {
			return err
		}
		switch rs.Status.Phase {
		case corev1alpha1.ResourceSliceAccepted:
			return fmt.Errorf("accepted: %v", rs.Status.Resources)
		case corev1alpha1.ResourceSliceDenied:
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return errors.New("not decided after 20s")
}

// remoteNamespaceRefused: a RemoteNamespace request (as the consumer's
// replicator writes it) for a name the tenant may not have is refused and
// no namespace of that name is created.
func remoteNamespaceRefused(ctx context.Context, tenant, admin client.Client, tenantNS, source, remote string) error {
	rn := &offloadingv1alpha1.RemoteNamespace{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "squat-" + remote,
		Labels:      map[string]string{corev1alpha1.LabelRemoteClusterID: "alpha"},
		Annotations: map[string]string{"annex.dev/origin-namespace": "annex-tenant-beta"}},
		Spec: offloadingv1alpha1.RemoteNamespaceSpec{SourceNamespace: source, RemoteNamespace: remote}}
	if err := tenant.Create(ctx, rn); err != nil {
		return refused(err, "")
	}
	defer func() { _ = admin.Delete(context.Background(), rn) }()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if err := admin.Get(ctx, client.ObjectKey{Name: remote}, &corev1.Namespace{}); err == nil {
			return fmt.Errorf("namespace %s was created", remote)
		}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(rn), rn); err != nil {
			return err
		}
		if rn.Status.Phase == offloadingv1alpha1.RemoteNamespaceFailed {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return errors.New("not refused after 20s")
}

// waitPod waits for the real pod of a ShadowPod.
func waitPod(ctx context.Context, admin client.Client, key client.ObjectKey) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if err := admin.Get(ctx, key, &corev1.Pod{}); err == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	sp := &offloadingv1alpha1.ShadowPod{}
	_ = admin.Get(ctx, key, sp)
	return fmt.Errorf("no pod for ShadowPod %s after 20s (status %s: %s)", key, sp.Status.Reason, sp.Status.Message)
}

// TestHostileProvider: a provider that lies in what it reports (its agent
// stopped, its administrator writing its pods' statuses by hand) cannot make
// alpha publish addresses outside the provider's pod CIDR, set conditions
// alpha owns, or store unbounded statuses.
func TestHostileProvider(t *testing.T) {
	alpha, beta := env.clusters[0], env.clusters[1]
	ctx := context.Background()
	installAndRunAgent(t, alpha, "alpha")
	betaAgent := installAndRunAgent(t, beta, "beta")
	peer(t, alpha, beta)
	t.Cleanup(func() {
		if out, err := annexctl(t, "unpeer", "--kubeconfig", alpha.KubeconfigPath(), "--remote-kubeconfig", beta.KubeconfigPath()); err != nil {
			t.Errorf("unpeer: %v\n%s", err, out)
		}
	})
	ca, cb := crClient(t, alpha), crClient(t, beta)
	if err := ca.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lied-to"}}); err != nil {
		t.Fatal(err)
	}
	if out, err := annexctl(t, "offload", "namespace", "lied-to", "--kubeconfig", alpha.KubeconfigPath(), "--pod-strategy", "Remote"); err != nil {
		t.Fatalf("offload: %v\n%s", err, out)
	}
	const gate = "example.com/load-balancer-ready"
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "lied-to", Name: "victim"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: gate}}}}
	if err := ca.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	remote := client.ObjectKey{Namespace: "lied-to-alpha", Name: "victim"}
	eventually(t, 60*time.Second, "the victim running on beta and mirrored on alpha", func() error {
		if err := ca.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
			return fmt.Errorf("phase %s ip %q", pod.Status.Phase, pod.Status.PodIP)
		}
		return nil
	})
	// From here on beta's agent is silent and beta's administrator lies.
	betaAgent.kill(t)
	t.Cleanup(func() { betaAgent.start(t) })

	// The consumer reads the provider's pod: the lie goes into its status,
	// as far as beta's API server lets it (it refuses malformed IPs).
	real := &corev1.Pod{}
	if err := cb.Get(ctx, remote, real); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	big := strings.Repeat("x", 30000)
	lie := real.DeepCopy()
	lie.Status.PodIP = "192.0.2.10" // not in beta's pod CIDR (10.201.0.0/16)
	lie.Status.PodIPs = []corev1.PodIP{{IP: "192.0.2.10"}}
	lie.Status.Message = big
	lie.Status.Conditions = append(lie.Status.Conditions,
		corev1.PodCondition{Type: gate, Status: corev1.ConditionTrue, LastTransitionTime: now},
		corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "Lie", LastTransitionTime: now})
	lie.Status.ContainerStatuses = append(lie.Status.ContainerStatuses,
		corev1.ContainerStatus{Name: "evil", Image: "evil", Ready: true, RestartCount: 7},
		corev1.ContainerStatus{Name: "c", Image: "c", Ready: true, RestartCount: 9})
	if err := cb.Status().Patch(ctx, lie, client.MergeFrom(real)); err != nil {
		t.Fatalf("write the lie: %v", err)
	}
	// The lie is seen (something else of it arrives: the restart count or
	// its message), and what alpha publishes is bounded and confined.
	eventually(t, 20*time.Second, "alpha confines what beta claims", func() error {
		if err := ca.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		var problems []string
		if pod.Status.PodIP == "192.0.2.10" {
			problems = append(problems, "pod IP outside beta's pod CIDR published")
		}
		for _, ip := range pod.Status.PodIPs {
			if ip.IP == "192.0.2.10" || ip.IP == "not-an-ip" {
				problems = append(problems, "podIPs holds "+ip.IP)
			}
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == gate && c.Status == corev1.ConditionTrue {
				problems = append(problems, "readiness gate set by the provider")
			}
			if c.Type == corev1.DisruptionTarget {
				problems = append(problems, "DisruptionTarget set by the provider")
			}
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				problems = append(problems, "Ready although its gate is not True")
			}
		}
		names := map[string]int{}
		for _, s := range pod.Status.ContainerStatuses {
			names[s.Name]++
		}
		if names["evil"] > 0 || names["c"] != 1 {
			problems = append(problems, fmt.Sprintf("container statuses %v", names))
		}
		if len(pod.Status.Message) > 4096 {
			problems = append(problems, fmt.Sprintf("message of %d bytes", len(pod.Status.Message)))
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		if pod.Status.Message == "" && pod.Status.PodIP != "" {
			return errors.New("the lie has not arrived yet")
		}
		return nil
	})

	// Lies about what the peering agreed (attack_provider_test.go): a grant
	// above the request, and ranges other than the link's.
	providerGrantInflated(ctx, t, ca, cb, "alpha", "beta")
	providerRangesMoved(ctx, t, alpha, beta, ca, cb, "beta")
}
