package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/network"
)

// checkDirect links beta and gamma, asks for direct connections on svc and
// checks that each provider reaches the other's pod at its own view of the
// pod's real address; then it undoes both and checks the transit route is
// back.
func checkDirect(t *testing.T, ns string, svc *corev1.Service, local, onBeta, onGamma *corev1.Pod, ca, cb, cg client.Client) {
	ctx := context.Background()
	remoteNS := ns + "-alpha"
	beta, gamma := env.clusters[1], env.clusters[2]
	if out, err := annexctl(t, "network", "connect", "--kubeconfig", beta.KubeconfigPath(), "--remote-kubeconfig", gamma.KubeconfigPath()); err != nil {
		t.Fatalf("network connect beta gamma: %v\n%s", err, out)
	}
	direct := func(v string) {
		t.Helper()
		patch := client.MergeFrom(svc.DeepCopy())
		if v == "" {
			delete(svc.Annotations, corev1alpha1.AnnotationUseDirectConnections)
		} else {
			svc.Annotations = map[string]string{corev1alpha1.AnnotationUseDirectConnections: v}
		}
		if err := ca.Patch(ctx, svc, patch); err != nil {
			t.Fatal(err)
		}
	}
	direct("true")
	realPod := func(c client.Client, name string) string {
		t.Helper()
		p := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: name}, p); err != nil {
			t.Fatal(err)
		}
		return p.Status.PodIP
	}
	var betaGamma, gammaBeta *networkingv1alpha1.NetworkConfiguration
	eventually(t, 30*time.Second, "beta-gamma link ready", func() (err error) {
		if betaGamma, err = link(ctx, cb, "gamma"); err != nil {
			return err
		}
		gammaBeta, err = link(ctx, cg, "beta")
		return err
	})
	gammaOnBeta := mustTranslate(t, realPod(cg, onGamma.Name), betaGamma.Spec.Remote.PodCIDR, betaGamma.Status.RemappedRemote.PodCIDR)
	betaOnGamma := mustTranslate(t, realPod(cb, onBeta.Name), gammaBeta.Spec.Remote.PodCIDR, gammaBeta.Status.RemappedRemote.PodCIDR)
	betaAlpha, err := link(ctx, cb, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	localOnBeta := mustTranslate(t, local.Status.PodIP, betaAlpha.Spec.Remote.PodCIDR, betaAlpha.Status.RemappedRemote.PodCIDR)
	for _, c := range []struct {
		name   string
		client client.Client
		want   string
	}{{"beta", cb, gammaOnBeta}, {"gamma", cg, betaOnGamma}} {
		eventually(t, 30*time.Second, c.name+" reaches the other provider's pod directly", func() error {
			got, err := sliceAddresses(ctx, c.client, remoteNS, "mix")
			if err == nil && !slices.Contains(got, c.want) {
				err = fmt.Errorf("%s has %v, want %s among them", c.name, got, c.want)
			}
			return err
		})
	}
	if got, _ := sliceAddresses(ctx, cb, remoteNS, "mix"); !slices.Contains(got, localOnBeta) {
		t.Errorf("beta's endpoints %v lost the alpha-local pod %s", got, localOnBeta)
	}
	t.Logf("direct: beta reaches gamma's pod at %s, gamma reaches beta's at %s", gammaOnBeta, betaOnGamma)
	real := &discoveryv1.EndpointSliceList{}
	if err := cb.List(ctx, real, client.InNamespace(remoteNS), client.MatchingLabels{discoveryv1.LabelServiceName: "mix"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range real.Items {
		if _, ok := s.Annotations[corev1alpha1.AnnotationDirectConnectionsData]; ok {
			t.Errorf("EndpointSlice %s carries the direct-connections data", s.Name)
		}
	}

	direct("")
	if out, err := annexctl(t, "network", "disconnect", "--kubeconfig", beta.KubeconfigPath(), "--remote-kubeconfig", gamma.KubeconfigPath()); err != nil {
		t.Fatalf("network disconnect beta gamma: %v\n%s", err, out)
	}
	eventually(t, 30*time.Second, "beta back on the transit route", func() error {
		got, err := sliceAddresses(ctx, cb, remoteNS, "mix")
		if err == nil && slices.Contains(got, gammaOnBeta) {
			err = fmt.Errorf("beta still has %s", gammaOnBeta)
		}
		return err
	})
}

// link returns c's NetworkConfiguration with remote, once both remappings
// are known.
func link(ctx context.Context, c client.Client, remote string) (*networkingv1alpha1.NetworkConfiguration, error) {
	list := &networkingv1alpha1.NetworkConfigurationList{}
	if err := c.List(ctx, list, client.InNamespace(corev1alpha1.AgentNamespace)); err != nil {
		return nil, err
	}
	for i := range list.Items {
		nc := &list.Items[i]
		if nc.Spec.RemoteClusterID == remote {
			if nc.Status.RemappedRemote == nil || nc.Status.RemappedLocal == nil {
				return nil, fmt.Errorf("link with %s not ready: %+v", remote, nc.Status)
			}
			return nc, nil
		}
	}
	return nil, fmt.Errorf("no NetworkConfiguration for %s", remote)
}

// sliceAddresses returns every endpoint address of svc's EndpointSlices.
func sliceAddresses(ctx context.Context, c client.Client, ns, svc string) ([]string, error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := c.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: svc}); err != nil {
		return nil, err
	}
	var out []string
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			out = append(out, ep.Addresses...)
		}
	}
	slices.Sort(out)
	return out, nil
}

func mustTranslate(t *testing.T, addr, original, remapped string) string {
	t.Helper()
	m, err := network.ParseMapping(original, remapped)
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.ToLocal(netip.MustParseAddr(addr))
	if err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// checkNetwork runs in namespace ns of alpha (offloaded to beta and gamma,
// whose remote namespaces are <ns>-alpha): alpha and gamma have the same
// pod CIDR, so each remaps the other's. It checks the pod IPs alpha shows,
// the endpoints each provider gets for alpha-local pods and for pods on the
// other provider (transit addresses), and that an agent restart changes no
// mapping and no transit address.
func checkNetwork(t *testing.T, ns string, alpha *testAgent, ca, cb, cg client.Client) {
	ctx := context.Background()
	remoteNS := ns + "-alpha"
	var alphaGamma, gammaAlpha, betaAlpha *networkingv1alpha1.NetworkConfiguration
	eventually(t, 30*time.Second, "network links ready", func() (err error) {
		if alphaGamma, err = link(ctx, ca, "gamma"); err != nil {
			return err
		}
		if gammaAlpha, err = link(ctx, cg, "alpha"); err != nil {
			return err
		}
		betaAlpha, err = link(ctx, cb, "alpha")
		return err
	})
	if alphaGamma.Status.RemappedRemote.PodCIDR == "" || gammaAlpha.Status.RemappedRemote.PodCIDR == "" {
		t.Fatalf("alpha and gamma overlap but were not remapped: alpha sees gamma as %+v, gamma sees alpha as %+v",
			alphaGamma.Status.RemappedRemote, gammaAlpha.Status.RemappedRemote)
	}

	// One alpha-local pod, one on beta, one on gamma, behind Service "mix".
	local, onBeta, onGamma, svc := podsOnEachCluster(t, ca, ns, "mix", map[string]string{"mix": "yes"})

	t.Run("offloaded pod IP is in alpha's view of gamma", func(t *testing.T) {
		real := &corev1.Pod{}
		if err := cg.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: onGamma.Name}, real); err != nil {
			t.Fatal(err)
		}
		view, _ := network.ParseCIDR(alphaGamma.Status.RemappedRemote.PodCIDR)
		if !view.Contains(netip.MustParseAddr(onGamma.Status.PodIP)) {
			t.Errorf("alpha shows %s for its pod on gamma, not in its mapping %s of gamma", onGamma.Status.PodIP, view)
		}
		if want := mustTranslate(t, real.Status.PodIP, alphaGamma.Spec.Remote.PodCIDR, alphaGamma.Status.RemappedRemote.PodCIDR); onGamma.Status.PodIP != want {
			t.Errorf("alpha shows %s, want %s (gamma's real %s through %s)", onGamma.Status.PodIP, want, real.Status.PodIP, view)
		}
		t.Logf("pod on gamma: real IP %s, alpha sees %s", real.Status.PodIP, onGamma.Status.PodIP)
	})
	transit := mustTranslate(t, onGamma.Annotations[corev1alpha1.AnnotationTransitAddress], betaAlpha.Spec.Remote.ExternalCIDR, betaAlpha.Status.RemappedRemote.ExternalCIDR)
	t.Run("providers get endpoints they can route to", func(t *testing.T) {
		// Gamma: the alpha-local pod through gamma's mapping of alpha's pod
		// CIDR, beta's pod as an alpha transit address, its own pod left out.
		gammaLocal := mustTranslate(t, local.Status.PodIP, gammaAlpha.Spec.Remote.PodCIDR, gammaAlpha.Status.RemappedRemote.PodCIDR)
		if gammaLocal == local.Status.PodIP {
			t.Errorf("gamma's address of the alpha-local pod %s is not remapped", gammaLocal)
		}
		wantGamma := []string{
			gammaLocal,
			mustTranslate(t, onBeta.Annotations[corev1alpha1.AnnotationTransitAddress], gammaAlpha.Spec.Remote.ExternalCIDR, gammaAlpha.Status.RemappedRemote.ExternalCIDR),
		}
		wantBeta := []string{
			mustTranslate(t, local.Status.PodIP, betaAlpha.Spec.Remote.PodCIDR, betaAlpha.Status.RemappedRemote.PodCIDR),
			transit,
		}
		slices.Sort(wantGamma)
		slices.Sort(wantBeta)
		for _, c := range []struct {
			name   string
			client client.Client
			want   []string
		}{{"gamma", cg, wantGamma}, {"beta", cb, wantBeta}} {
			eventually(t, 30*time.Second, c.name+"'s endpoints of mix", func() error {
				got, err := sliceAddresses(ctx, c.client, remoteNS, "mix")
				if err == nil && !slices.Equal(got, c.want) {
					err = fmt.Errorf("%s has %v, want %v", c.name, got, c.want)
				}
				return err
			})
		}
		t.Logf("alpha-local pod %s: gamma routes to %v, beta to %v", local.Status.PodIP, wantGamma, wantBeta)
	})
	t.Run("an agent restart changes no mapping and no transit address", func(t *testing.T) {
		alpha.kill(t)
		alpha.start(t)
		// A new pod gets an address of its own once the new agent leads:
		// by then it has rebuilt its state.
		late := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mix-late", Labels: local.Labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}},
				NodeSelector: map[string]string{corev1alpha1.LabelRemoteClusterID: "gamma"}}}
		if err := ca.Create(ctx, late); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "a transit address for a pod created after the restart", func() error {
			late := &corev1.Pod{}
			if err := ca.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mix-late"}, late); err != nil {
				return err
			}
			a := late.Annotations[corev1alpha1.AnnotationTransitAddress]
			switch a {
			case "":
				return errors.New("none yet")
			case onBeta.Annotations[corev1alpha1.AnnotationTransitAddress], onGamma.Annotations[corev1alpha1.AnnotationTransitAddress]:
				return fmt.Errorf("the new pod got %s, which another pod holds", a)
			}
			return nil
		})
		after, err := link(ctx, ca, "gamma")
		if err != nil {
			t.Fatal(err)
		}
		if *after.Status.RemappedRemote != *alphaGamma.Status.RemappedRemote || *after.Status.RemappedLocal != *alphaGamma.Status.RemappedLocal {
			t.Errorf("mapping changed: before %+v %+v, after %+v %+v", alphaGamma.Status.RemappedRemote, alphaGamma.Status.RemappedLocal,
				after.Status.RemappedRemote, after.Status.RemappedLocal)
		}
		for _, p := range []*corev1.Pod{onBeta, onGamma} {
			now := &corev1.Pod{}
			if err := ca.Get(ctx, client.ObjectKeyFromObject(p), now); err != nil {
				t.Fatal(err)
			}
			if a, b := p.Annotations[corev1alpha1.AnnotationTransitAddress], now.Annotations[corev1alpha1.AnnotationTransitAddress]; a != b {
				t.Errorf("pod %s: transit address %s became %s", p.Name, a, b)
			}
		}
		got, err := sliceAddresses(ctx, cb, remoteNS, "mix")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(got, transit) {
			t.Errorf("beta's endpoints %v lost the transit address %s", got, transit)
		}
	})
	t.Run("direct connections between beta and gamma", func(t *testing.T) {
		checkDirect(t, ns, svc, local, onBeta, onGamma, ca, cb, cg)
	})
	if t.Failed() {
		return
	}
	if err := ca.Delete(ctx, onGamma); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the gamma pod's endpoint gone from beta", func() error {
		got, err := sliceAddresses(ctx, cb, remoteNS, "mix")
		if err == nil && slices.Contains(got, transit) {
			err = errors.New("still there")
		}
		return err
	})
}

// podsOnEachCluster creates, in namespace ns of alpha (offloaded), the pods
// <name>-local (on an alpha node), <name>-beta and <name>-gamma with labels,
// and Service <name> over them (port 80 to 8080); it waits until they run with
// IPs and transit addresses and returns them as alpha sees them. Everything
// is deleted when the test ends.
func podsOnEachCluster(t *testing.T, ca client.Client, ns, name string, labels map[string]string) (local, onBeta, onGamma *corev1.Pod, svc *corev1.Service) {
	t.Helper()
	ctx := context.Background()
	mkpod := func(suffix string, on func(*corev1.PodSpec)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + suffix, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}
		on(&p.Spec)
		if err := ca.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	local = mkpod("local", func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: "type", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"virtual-node"}}}}}}}}
	})
	onBeta = mkpod("beta", func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{corev1alpha1.LabelRemoteClusterID: "beta"} })
	onGamma = mkpod("gamma", func(s *corev1.PodSpec) {
		s.NodeSelector = map[string]string{corev1alpha1.LabelRemoteClusterID: "gamma"}
	})
	svc = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{
		Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(8080)}}}}
	if err := ca.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ca.Delete(ctx, svc)
		_ = ca.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.MatchingLabels(labels))
		eventually(t, 60*time.Second, name+" pods gone", func() error {
			pods := &corev1.PodList{}
			if err := ca.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
				return err
			}
			if len(pods.Items) > 0 {
				return fmt.Errorf("%d left", len(pods.Items))
			}
			return nil
		})
	})
	eventually(t, 90*time.Second, name+" pods Running with IPs and transit addresses", func() error {
		return podsReady(ctx, ca, ns, k8slabels.SelectorFromSet(labels).String(), 3, func(p *corev1.Pod) error {
			if p.Name != local.Name && p.Annotations[corev1alpha1.AnnotationTransitAddress] == "" {
				return fmt.Errorf("pod %s has no transit address", p.Name)
			}
			return nil
		})
	})
	for _, p := range []*corev1.Pod{local, onBeta, onGamma} {
		if err := ca.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			t.Fatal(err)
		}
	}
	return local, onBeta, onGamma, svc
}
