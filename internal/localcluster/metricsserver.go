package localcluster

// metrics-server (Options.MetricsServer): the resource metrics API
// (metrics.k8s.io, what `kubectl top` and the HorizontalPodAutoscaler read)
// for clusters with real nodes.
//
// metrics-server runs as a process of the cluster, not as a pod: inside real
// node 0's mount, network and PID namespaces (like its kubelet), because it
// scrapes kubelets at their InternalIP, which only the node network reaches.
// It serves on node 0's address, port metricsServerPort, with a certificate
// of the cluster CA for the in-cluster name of its Service. The API server's
// aggregator reaches it the way it reaches kubelets: through the network
// process's CONNECT proxy (its egress selector), at the address of a
// selector-less Service's EndpointSlice that Start writes (node 0's address
// and metricsServerPort; the API server runs with
// --enable-aggregator-routing, so it dials endpoints, not ClusterIPs). The
// APIService v1beta1.metrics.k8s.io points at that Service with the cluster
// CA as caBundle.
//
// It authenticates to the API server and to kubelets with a client
// certificate of the cluster CA for user metricsServerUser, which the RBAC
// objects of metricsServerRBAC allow what metrics-server needs: read nodes
// and pods, get nodes/metrics from kubelets, delegate authentication and
// authorization, and read the front proxy's CA. Kubelets' serving
// certificates are all signed by the cluster CA (real nodes' by Start,
// kwok's too, virtual nodes' by the controller manager's kubelet-serving
// signer, which uses the cluster CA), so metrics-server verifies them with
// it: no --kubelet-insecure-tls.

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// MetricsServer is the binary of metrics-server and its kind of
// component: it runs as NodeComponent(MetricsServer, <real node 0>).
const MetricsServer = "metrics-server"

const (
	// metricsServerPort is where metrics-server serves, on node 0's
	// address inside the node's network namespace.
	metricsServerPort = 4443
	// metricsServerUser is the user metrics-server authenticates as, to
	// the API server and to kubelets.
	metricsServerUser = "system:metrics-server"
	// Certificates, in the PKI directory.
	metricsServerServingCertName = "metrics-server-serving"
	metricsServerClientCertName  = "metrics-server-client"
	// metricsServerNamespace and metricsServerService name the Service
	// the APIService points at.
	metricsServerNamespace = metav1.NamespaceSystem
	metricsServerService   = "metrics-server"
	// metricsAPIService is the name of the APIService of metrics.k8s.io.
	metricsAPIService = "v1beta1.metrics.k8s.io"
	// MetricResolution is how often metrics-server scrapes the kubelets:
	// PodMetrics of a new pod appear within about this long (plus the
	// kubelet's own housekeeping) after its containers start.
	MetricResolution = 10 * time.Second
	// metricsScrapeTimeout bounds one scrape of a kubelet.
	metricsScrapeTimeout = 5 * time.Second
	// metricsServerManagedBy is the managed-by label of the EndpointSlice
	// Start writes, so that the EndpointSlice controllers leave it alone.
	metricsServerManagedBy = "localcluster.annex.dev"
)

// CheckMetricsServer is CheckBinaries for Options.MetricsServer: nil when
// binDir holds the metrics-server binary tools/kube builds, else an error
// wrapping ErrMissingBinaries that says how to build it.
func CheckMetricsServer(binDir string) error {
	return missingError(binDir, missingExecutables(binDir, []string{MetricsServer}))
}

// metricsServerCerts are the certificates of metrics-server running on node
// n: its serving certificate (the Service's in-cluster names, which the
// aggregator checks, and the node's address) and its client certificate.
func metricsServerCerts(n realNode) map[string]certRequest {
	svc := metricsServerService + "." + metricsServerNamespace + ".svc"
	return map[string]certRequest{
		metricsServerServingCertName: {
			commonName: svc,
			dnsNames:   []string{svc, metricsServerService + "." + metricsServerNamespace, svc + ".cluster.local"},
			ips:        []net.IP{net.IP(n.IP.AsSlice())},
			usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		},
		metricsServerClientCertName: clientCert(metricsServerUser),
	}
}

// metricsServerArgs is metrics-server's command line on node n.
func metricsServerArgs(l layout, n realNode) []string {
	pki := l.pki()
	kc := l.kubeconfig(MetricsServer)
	return []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=" + n.IP.String(),
		"--secure-port=" + strconv.Itoa(metricsServerPort),
		"--tls-cert-file=" + pki.cert(metricsServerServingCertName),
		"--tls-private-key-file=" + pki.key(metricsServerServingCertName),
		// Every kubelet's serving certificate is the cluster CA's (see
		// the top of this file).
		"--kubelet-certificate-authority=" + pki.caCert(),
		// Real nodes have no resolvable names; virtual nodes advertise
		// their kubelet port in status.daemonEndpoints.
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-use-node-status-port",
		// kwok serves no resource metrics, and its nodes' address is the
		// host's loopback, which the node network does not reach.
		"--node-selector=" + NodeTypeLabel + "!=" + NodeTypeKwok,
		"--metric-resolution=" + MetricResolution.String(),
		// Must be shorter than the resolution (its default, 10 s, is
		// not).
		"--kubelet-request-timeout=" + metricsScrapeTimeout.String(),
		"--profiling=false",
		"--v=1",
	}
}

// metricsServerRBAC are the RBAC objects that let metricsServerUser do what
// metrics-server does, and let the view, edit and admin roles read the
// metrics API.
func metricsServerRBAC() ([]*rbacv1.ClusterRole, []*rbacv1.ClusterRoleBinding, []*rbacv1.RoleBinding) {
	user := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: metricsServerUser}}
	read := []string{"get", "list", "watch"}
	roles := []*rbacv1.ClusterRole{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:metrics-server"},
			Rules: []rbacv1.PolicyRule{
				// The kubelets' /metrics/resource.
				{APIGroups: []string{""}, Resources: []string{"nodes/metrics"}, Verbs: []string{"get"}},
				{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: read},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{
				Name: "system:aggregated-metrics-reader",
				Labels: map[string]string{
					"rbac.authorization.k8s.io/aggregate-to-view":  "true",
					"rbac.authorization.k8s.io/aggregate-to-edit":  "true",
					"rbac.authorization.k8s.io/aggregate-to-admin": "true",
				},
			},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"metrics.k8s.io"}, Resources: []string{"nodes", "pods"}, Verbs: read}},
		},
	}
	clusterBindings := []*rbacv1.ClusterRoleBinding{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:metrics-server"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:metrics-server"},
			Subjects:   user,
		},
		{
			// TokenReviews and SubjectAccessReviews for its clients.
			ObjectMeta: metav1.ObjectMeta{Name: "metrics-server:system:auth-delegator"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
			Subjects:   user,
		},
	}
	bindings := []*rbacv1.RoleBinding{{
		// The front proxy's CA and header names, in the ConfigMap
		// extension-apiserver-authentication.
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-server-auth-reader", Namespace: metav1.NamespaceSystem},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
		Subjects:   user,
	}}
	return roles, clusterBindings, bindings
}

// metricsServerServiceObject is the selector-less Service the APIService
// points at; its endpoint is metricsServerEndpoints'.
func metricsServerServiceObject() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: metricsServerService, Namespace: metricsServerNamespace},
		Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{
				Name: "https", Protocol: corev1.ProtocolTCP, Port: 443,
				TargetPort: intstr.FromInt32(metricsServerPort),
			}},
		},
	}
}

// metricsServerEndpoints is the Service's one endpoint: metrics-server on
// node n.
func metricsServerEndpoints(n realNode) *discoveryv1.EndpointSlice {
	name, ready, port := "https", true, int32(metricsServerPort)
	proto := corev1.ProtocolTCP
	nodeName := n.Name
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      metricsServerService,
			Namespace: metricsServerNamespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: metricsServerService,
				discoveryv1.LabelManagedBy:   metricsServerManagedBy,
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{n.IP.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName:   &nodeName,
		}},
		Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
}

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// metricsAPIServiceObject registers metrics.k8s.io/v1beta1 at the Service;
// the aggregator checks metrics-server's certificate with caPEM.
func metricsAPIServiceObject(caPEM []byte) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": metricsAPIService},
		"spec": map[string]any{
			"group":   "metrics.k8s.io",
			"version": "v1beta1",
			"service": map[string]any{
				"namespace": metricsServerNamespace,
				"name":      metricsServerService,
				"port":      int64(443),
			},
			"caBundle":             base64.StdEncoding.EncodeToString(caPEM),
			"groupPriorityMinimum": int64(100),
			"versionPriority":      int64(100),
		},
	}}
}

// writeMetricsServerKubeconfig writes metrics-server's kubeconfig: the API
// address (it runs in node 0's network namespace) and its client
// certificate.
func (c *Cluster) writeMetricsServerKubeconfig() error {
	c.mu.Lock()
	server := "https://" + c.st.apiAddress()
	c.mu.Unlock()
	return c.writeClientKubeconfig(MetricsServer, metricsServerClientCertName, metricsServerUser, server)
}

// startMetricsServer grants metrics-server its rights, starts it in real
// node n and registers the metrics API, and returns once the aggregator
// reports the APIService Available.
func (c *Cluster) startMetricsServer(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, n realNode) error {
	if err := createMetricsServerRBAC(ctx, cs); err != nil {
		return err
	}
	if err := c.writeMetricsServerKubeconfig(); err != nil {
		return err
	}
	l := layout{dir: c.dir}
	c.mu.Lock()
	bin := filepath.Join(c.st.BinDir, MetricsServer)
	nodeInit := c.st.component(NodeComponent(NodeInit, n.Name))
	c.mu.Unlock()
	if nodeInit == nil {
		return fmt.Errorf("node %s has no init: it must run before metrics-server starts in it", n.Name)
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return err
	}
	args := nsenterArgs(nodeInit.PID, l.node(n.Name).dir, append([]string{bin}, metricsServerArgs(l, n)...)...)
	name := NodeComponent(MetricsServer, n.Name)
	if err := c.launchInNode(componentState{Name: name, Binary: nsenter, Args: args, Log: l.log(name)}); err != nil {
		return err
	}
	if err := applyMetricsServerService(ctx, cs, n); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	caPEM := c.CA()
	if len(caPEM) == 0 {
		return errors.New("no cluster CA in pki/ca.crt for the APIService's caBundle")
	}
	if err := applyUnstructured(ctx, dyn.Resource(apiServiceGVR), metricsAPIServiceObject(caPEM)); err != nil {
		return fmt.Errorf("register APIService %s: %w", metricsAPIService, err)
	}
	return c.await(ctx, "APIService "+metricsAPIService+" Available", []string{name}, func(ctx context.Context) error {
		return apiServiceAvailable(ctx, dyn, metricsAPIService)
	})
}

// createMetricsServerRBAC creates metricsServerRBAC's objects (kept if they
// exist from an earlier run in the same directory: they never change).
func createMetricsServerRBAC(ctx context.Context, cs kubernetes.Interface) error {
	roles, clusterBindings, bindings := metricsServerRBAC()
	var errs []error
	keep := func(kind, name string, err error) {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			errs = append(errs, fmt.Errorf("create %s %s: %w", kind, name, err))
		}
	}
	for _, r := range roles {
		_, err := cs.RbacV1().ClusterRoles().Create(ctx, r, metav1.CreateOptions{})
		keep("ClusterRole", r.Name, err)
	}
	for _, b := range clusterBindings {
		_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{})
		keep("ClusterRoleBinding", b.Name, err)
	}
	for _, b := range bindings {
		_, err := cs.RbacV1().RoleBindings(b.Namespace).Create(ctx, b, metav1.CreateOptions{})
		keep("RoleBinding", b.Namespace+"/"+b.Name, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("metrics-server's RBAC: %w", err)
	}
	return nil
}

// applyMetricsServerService creates the Service and its EndpointSlice, or
// points an existing EndpointSlice (an earlier run in the same directory,
// maybe with another node network) at node n.
func applyMetricsServerService(ctx context.Context, cs kubernetes.Interface, n realNode) error {
	svc := metricsServerServiceObject()
	if _, err := cs.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	want := metricsServerEndpoints(n)
	slices := cs.DiscoveryV1().EndpointSlices(want.Namespace)
	_, err := slices.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var got *discoveryv1.EndpointSlice
		if got, err = slices.Get(ctx, want.Name, metav1.GetOptions{}); err == nil {
			got.Labels, got.AddressType, got.Endpoints, got.Ports = want.Labels, want.AddressType, want.Endpoints, want.Ports
			_, err = slices.Update(ctx, got, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("write EndpointSlice %s/%s: %w", want.Namespace, want.Name, err)
	}
	return nil
}

// applyUnstructured creates obj, or replaces the spec of the existing one.
func applyUnstructured(ctx context.Context, r dynamic.ResourceInterface, obj *unstructured.Unstructured) error {
	_, err := r.Create(ctx, obj, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	got, err := r.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	got.Object["spec"] = obj.Object["spec"]
	_, err = r.Update(ctx, got, metav1.UpdateOptions{})
	return err
}

// apiServiceAvailable succeeds once the APIService's Available condition is
// True, and otherwise says why not.
func apiServiceAvailable(ctx context.Context, dyn dynamic.Interface, name string) error {
	obj, err := dyn.Resource(apiServiceGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, cond := range conds {
		m, _ := cond.(map[string]any)
		if m["type"] != "Available" {
			continue
		}
		if m["status"] == "True" {
			return nil
		}
		return fmt.Errorf("APIService %s not Available: %v: %v", name, m["reason"], m["message"])
	}
	return fmt.Errorf("APIService %s has no Available condition yet", name)
}
