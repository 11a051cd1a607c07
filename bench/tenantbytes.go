package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/cli/install"
	"github.com/annexhq/annex/internal/controller/tenantquota"
)

// keyTenantBytes is the target of TenantBytes.
const keyTenantBytes = "tenant-bytes"

// agentMemoryLimit is the provider agent's memory limit in the chart
// (install.Options.AgentMemoryLimit's default): what a tenant must not be
// able to make it exceed.
const agentMemoryLimit = 512 << 20

// TenantBytes is what tenant A stored on the provider when it wrote its
// maximum of every kind it may write (issue #37, "Bytes"): objects as
// large as the admission policies allow, as many as the quotas admit.
type TenantBytes struct {
	// Admitted counts the objects created, by kind; Stopped is the first
	// refusal of each kind that ended its writes.
	Admitted map[string]int    `json:"admitted"`
	Stopped  map[string]string `json:"stopped"`
	// StoredBytes is what A's remote namespaces hold afterwards: each
	// object's JSON, with the data of Secrets counted decoded.
	StoredBytes int64 `json:"storedBytes"`
	// BoundBytes is docs/security.md's bound for A's grant: each kind's
	// budget times its size bounds, plus 2 KiB per object for its name,
	// UID, timestamps and JSON.
	BoundBytes  int64 `json:"boundBytes"`
	GrantedPods int64 `json:"grantedPods"`
	// AgentRSSBefore and AgentRSSAfter are the provider agent's VmRSS
	// before the writes and 10 s after the last.
	AgentRSSBefore int64   `json:"agentRSSBefore"`
	AgentRSSAfter  int64   `json:"agentRSSAfter"`
	Seconds        float64 `json:"seconds"`
	Error          string  `json:"error,omitempty"`
}

// runTenantBytes has tenant A write its maximum on the provider, kind by
// kind into its remote namespace, and measures what is stored and the
// provider agent's memory.
func runTenantBytes(ctx context.Context, e *env, a *floodTenant) *TenantBytes {
	tb := &TenantBytes{Admitted: map[string]int{}, Stopped: map[string]string{}}
	start := time.Now()
	agent := e.agents[providerName]
	if s, err := readProc(agent.PID); err == nil {
		tb.AgentRSSBefore = s.RSSBytes
	}
	var errs []string
	for _, kind := range []struct {
		name string
		make func(i int) client.Object
	}{
		{"ConfigMap", func(i int) client.Object {
			return &corev1.ConfigMap{ObjectMeta: maxMeta(i), Data: map[string]string{"d": strings.Repeat("x", install.DefaultMaxDataBytes-1)}}
		}},
		{"Secret", func(i int) client.Object {
			return &corev1.Secret{ObjectMeta: maxMeta(i), Data: map[string][]byte{"d": []byte(strings.Repeat("x", install.DefaultMaxDataBytes-1))}}
		}},
		{"Service", func(i int) client.Object {
			return &corev1.Service{ObjectMeta: maxMeta(i), Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "bytes"},
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
		}},
		{"ShadowEndpointSlice", maxEndpointSlice},
		{"ShadowPod", maxShadowPod},
	} {
		n, stop, err := writeUntilRefused(ctx, a.client, kind.make)
		tb.Admitted[kind.name], tb.Stopped[kind.name] = n, stop
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", kind.name, err))
		}
		e.log.printf("tenant-bytes: tenant A stored %d %ss (stopped by: %s)", n, kind.name, firstLine(stop))
	}
	grant, err := grantedPods(ctx, e.provider, floodCluster)
	if err != nil {
		errs = append(errs, err.Error())
	}
	tb.GrantedPods, tb.BoundBytes = grant, tenantBytesBound(grant)
	if tb.StoredBytes, err = storedBytes(ctx, e.provider.cr, floodRemoteNS); err != nil {
		errs = append(errs, err.Error())
	}
	// The agent's caches have taken the objects in by now; its heap grows
	// with what it decodes, so give it a moment to settle.
	time.Sleep(10 * time.Second)
	if s, err := readProc(agent.PID); err == nil {
		tb.AgentRSSAfter = s.RSSBytes
	} else {
		errs = append(errs, err.Error())
	}
	tb.Seconds = time.Since(start).Seconds()
	tb.Error = strings.Join(errs, "; ")
	e.log.printf("tenant-bytes: tenant A stores %.1f MiB (bound for a grant of %d pods: %.1f MiB); the provider agent's RSS %.0f MiB before, %.0f MiB after",
		mib(tb.StoredBytes), grant, mib(tb.BoundBytes), mib(tb.AgentRSSBefore), mib(tb.AgentRSSAfter))
	return tb
}

// maxMeta is the metadata of tenant A's i-th object of a kind: as many
// bytes of annotations as annex-tenant-metadata allows (a key without a
// domain, which annex-tenant-metadata-keys keeps).
func maxMeta(i int) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: floodRemoteNS, Name: fmt.Sprintf("bytes-%d", i),
		Annotations: map[string]string{"a": strings.Repeat("x", install.DefaultMaxMetadataBytes-1)}}
}

// maxEndpointSlice is a ShadowEndpointSlice whose endpoints hold just under
// the data bound.
func maxEndpointSlice(i int) client.Object {
	host := strings.Repeat("h", 240)
	var eps []discoveryv1.Endpoint
	size := 0
	for j := 0; size+300 < install.DefaultMaxDataBytes && j < 1000; j++ {
		addr := fmt.Sprintf("10.%d.%d.%d", 100+j/62500, j/250%250, j%250+1)
		eps = append(eps, discoveryv1.Endpoint{Addresses: []string{addr}, Hostname: &host})
		size += len(addr) + len(host)
	}
	port, proto := int32(80), corev1.ProtocolTCP
	return &offloadingv1alpha1.ShadowEndpointSlice{ObjectMeta: maxMeta(i),
		Spec: offloadingv1alpha1.ShadowEndpointSliceSpec{Template: offloadingv1alpha1.EndpointSliceTemplate{
			Labels:      map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("bytes-%d", i)},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps,
			Ports: []discoveryv1.EndpointPort{{Port: &port, Protocol: &proto}}}}}
}

// maxShadowPod is a ShadowPod with a pod spec just under its bound and as
// many pod annotations as annex-tenant-shadowpods allows.
func maxShadowPod(i int) client.Object {
	sp := floodShadowPod(fmt.Sprintf("bytes-%d", i))
	sp.ObjectMeta = maxMeta(i)
	sp.Spec.Pod.Containers[0].Env = []corev1.EnvVar{{Name: "BLOB", Value: strings.Repeat("x", install.DefaultMaxPodBytes-2048)}}
	sp.Spec.PodAnnotations = map[string]string{"b": strings.Repeat("x", 256<<10-1)}
	return sp
}

// writeUntilRefused creates the objects make makes, one after another,
// until none has been admitted for 5 s (quota shares are divided again as
// the tenant writes), and returns how many were and the last refusal. A
// refusal that is not a quota's is an error.
func writeUntilRefused(ctx context.Context, c client.Client, make func(int) client.Object) (int, string, error) {
	n, last, stop := 0, time.Now(), ""
	for i := 0; time.Since(last) < 5*time.Second; i++ {
		err := c.Create(ctx, make(i))
		switch {
		case err == nil:
			n, last = n+1, time.Now()
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"):
			stop = err.Error()
			time.Sleep(200 * time.Millisecond)
		default:
			return n, stop, err
		}
	}
	return n, stop, nil
}

// grantedPods is the pods the provider granted consumer (its accepted
// ResourceSlices).
func grantedPods(ctx context.Context, provider *kube, consumer string) (int64, error) {
	list := &corev1alpha1.ResourceSliceList{}
	if err := provider.cr.List(ctx, list, client.InNamespace(corev1alpha1.TenantNamespaceName(consumer))); err != nil {
		return 0, err
	}
	var pods int64
	for _, rs := range list.Items {
		if rs.Status.Phase == corev1alpha1.ResourceSliceAccepted {
			q := rs.Status.Resources[corev1.ResourcePods]
			pods += q.Value()
		}
	}
	return pods, nil
}

// tenantBytesBound is docs/security.md's per-tenant bound with the default
// budget and byte bounds, for a grant of grantedPods, plus 2 KiB per object.
func tenantBytesBound(grantedPods int64) int64 {
	budget := tenantquota.DefaultBudget()
	count := func(name corev1.ResourceName) int64 { q := budget[name]; return q.Value() }
	meta, data := int64(install.DefaultMaxMetadataBytes), int64(install.DefaultMaxDataBytes)
	shadowPods := tenantquota.DefaultShadowPodsPerGrantedPod*grantedPods + tenantquota.ShadowPodsSlack
	perObject := int64(2 << 10)
	return count(corev1.ResourceConfigMaps)*(data+meta+perObject) +
		count(corev1.ResourceSecrets)*(data+meta+perObject) +
		count(corev1.ResourceServices)*(meta+perObject) +
		count(tenantquota.ResourceShadowEndpointSlices)*(data+meta+perObject) +
		shadowPods*(install.DefaultMaxPodBytes+256<<10+meta+perObject)
}

// storedBytes sums the JSON of every object of the kinds a tenant writes
// in namespace ns (Secrets' data counted decoded, as the bounds count it).
func storedBytes(ctx context.Context, c client.Client, ns string) (int64, error) {
	var total int64
	add := func(list client.ObjectList) error {
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		b, err := json.Marshal(list)
		if err != nil {
			return err
		}
		total += int64(len(b))
		return nil
	}
	secrets := &corev1.SecretList{}
	if err := c.List(ctx, secrets, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	for _, s := range secrets.Items {
		for k, v := range s.Data {
			total += int64(len(k) + len(v))
		}
		s.Data = nil
		b, err := json.Marshal(s)
		if err != nil {
			return 0, err
		}
		total += int64(len(b))
	}
	for _, l := range []client.ObjectList{&corev1.ConfigMapList{}, &corev1.ServiceList{},
		&offloadingv1alpha1.ShadowEndpointSliceList{}, &offloadingv1alpha1.ShadowPodList{}} {
		if err := add(l); err != nil {
			return 0, err
		}
	}
	return total, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// tenantBytesTarget: what tenant A stored within the documented bound, and
// the provider agent within its memory limit.
func tenantBytesTarget(r *Results) TargetResult {
	t := TargetResult{Key: keyTenantBytes,
		What: "Bytes: what tenant A stores on the provider when it writes its maximum of every kind (ConfigMaps, Secrets, Services, ShadowEndpointSlices, " +
			"ShadowPods, each as large as the admission policies allow, as many as the quotas admit), and the provider agent's memory meanwhile",
		How: "the JSON of the objects in A's remote namespace (Secrets' data decoded) against docs/security.md's bound for A's grant; " +
			"the provider agent's VmRSS 10 s after the last write against its memory limit",
		Target: fmt.Sprintf("stored ≤ the bound; agent RSS ≤ %d MiB", agentMemoryLimit>>20)}
	tb := r.TenantBytes
	if tb == nil {
		return t
	}
	kinds := slices.Sorted(maps.Keys(tb.Admitted))
	var counts []string
	for _, k := range kinds {
		counts = append(counts, fmt.Sprintf("%d %ss", tb.Admitted[k], k))
	}
	t.Result = fmt.Sprintf("%.1f MiB stored (bound %.1f MiB for a grant of %d pods: %s); agent RSS %.0f → %.0f MiB",
		mib(tb.StoredBytes), mib(tb.BoundBytes), tb.GrantedPods, strings.Join(counts, ", "), mib(tb.AgentRSSBefore), mib(tb.AgentRSSAfter))
	t.Met = ptrTo(tb.Error == "" && tb.StoredBytes <= tb.BoundBytes && tb.AgentRSSAfter <= agentMemoryLimit)
	if !*t.Met {
		t.Why = tb.Error
	}
	return t
}
