package linkgc

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/controller/gatewayconfig"
	"github.com/annexhq/annex/internal/gateway"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/localcluster/clustertest"
)

// TestIntegrationLinkWithoutPeering runs linkgc and gatewayconfig against a
// real API server. A provider peers with consumer alpha and is linked with
// beta for direct connections and with gamma by a link made before links
// recorded their purpose. alpha's ForeignCluster is deleted (an unpeering
// stopped right after it): alpha's link leaves the gateway's file and the
// API server, with a Warning Event; beta's link stays programmed; gamma's
// stays on the API server, not programmed, with TunnelConnected NoPeering.
func TestIntegrationLinkWithoutPeering(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lc := clustertest.Start(ctx, t, localcluster.Options{Name: "linkgc"})
	logf.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(0))))
	s := clustertest.Scheme(t)
	c, cfg := clustertest.Client(t, lc, s)
	clustertest.InstallCRDs(ctx, t, c)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: corev1alpha1.AgentNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	clustertest.Must(t, c.Create(ctx, &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "alpha"}}))
	for i, l := range []struct{ peer, purpose, pod, ext string }{
		{"alpha", networkingv1alpha1.LinkPurposePeering, "10.201.0.0/16", "10.71.0.0/16"},
		{"beta", networkingv1alpha1.LinkPurposeDirect, "10.202.0.0/16", "10.72.0.0/16"},
		{"gamma", "", "10.203.0.0/16", "10.73.0.0/16"},
	} {
		createLink(ctx, t, c, l.peer, l.purpose, l.pod, l.ext, int32(51820+i))
	}

	mgr := clustertest.NewManager(t, cfg, s)
	file := filepath.Join(t.TempDir(), "gateway.json")
	gw := gatewayconfig.New(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder("annex-gatewayconfig"),
		gatewayconfig.Options{ConfigPath: file, Address: "192.168.77.3"},
		gatewayconfig.Cluster{PodCIDR: netip.MustParsePrefix("10.200.0.0/16"), ServiceCIDR: netip.MustParsePrefix("10.96.0.0/16"),
			ExternalCIDR: netip.MustParsePrefix("10.70.0.0/16")}, clock.RealClock{})
	clustertest.Must(t, gw.SetupWithManager(mgr))
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("annex-linkgc")}
	clustertest.Must(t, r.SetupWithManager(mgr))
	clustertest.RunManager(ctx, t, mgr)

	clustertest.Eventually(t, 30*time.Second, "alpha's and beta's links in the gateway's file", func() error {
		return wantPeers(file, "alpha", "beta")
	})
	clustertest.Must(t, c.Delete(ctx, &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}}))
	clustertest.Eventually(t, 30*time.Second, "alpha's link removed by the agent", func() error {
		err := c.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: "alpha"}, &networkingv1alpha1.NetworkConfiguration{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	clustertest.Eventually(t, 30*time.Second, "only beta's link in the file", func() error { return wantPeers(file, "beta") })
	clustertest.Eventually(t, 30*time.Second, "Warning Event LinkRemoved about alpha's link", func() error {
		evs := &eventsv1.EventList{}
		if err := c.List(ctx, evs, client.InNamespace(corev1alpha1.AgentNamespace)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == EventLinkRemoved && e.Type == corev1.EventTypeWarning && e.Regarding.Name == "alpha" {
				return nil
			}
		}
		return fmt.Errorf("none among %d Events", len(evs.Items))
	})
	clustertest.Eventually(t, 30*time.Second, "gamma's old link kept, not programmed (NoPeering)", func() error {
		nc := &networkingv1alpha1.NetworkConfiguration{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: "gamma"}, nc); err != nil {
			return err
		}
		if cond := meta.FindStatusCondition(nc.Status.Conditions, networkingv1alpha1.ConditionTunnelConnected); cond == nil || cond.Reason != networkingv1alpha1.ReasonNoPeering {
			return fmt.Errorf("TunnelConnected %+v", cond)
		}
		return nil
	})
	for _, name := range []string{"beta", "gamma"} {
		if err := c.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: name}, &networkingv1alpha1.NetworkConfiguration{}); err != nil {
			t.Errorf("link %s: %v", name, err)
		}
	}
}

// createLink writes a Ready NetworkConfiguration with peer and a tunnel,
// recorded as made for purpose.
func createLink(ctx context.Context, t *testing.T, c client.Client, peer, purpose, pod, ext string, port int32) {
	t.Helper()
	priv, err := gateway.GenerateKey()
	clustertest.Must(t, err)
	pub, err := priv.Public()
	clustertest.Must(t, err)
	nc := &networkingv1alpha1.NetworkConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.AgentNamespace, Name: peer,
		Labels: map[string]string{corev1alpha1.LabelRemoteClusterID: peer, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}},
		Spec: networkingv1alpha1.NetworkConfigurationSpec{RemoteClusterID: peer,
			Local:  networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.200.0.0/16", ExternalCIDR: "10.70.0.0/16"},
			Remote: networkingv1alpha1.ClusterCIDRs{PodCIDR: pod, ExternalCIDR: ext},
			Tunnel: &networkingv1alpha1.TunnelSpec{ListenPort: port, RemotePublicKey: pub.String(), RemoteEndpoint: "192.168.77.9:51820"}}}
	if purpose != "" {
		nc.Labels[networkingv1alpha1.LabelLinkPurpose] = purpose
	}
	clustertest.Must(t, c.Create(ctx, nc))
	nc.Status.RemappedRemote, nc.Status.RemappedLocal = &networkingv1alpha1.RemappedCIDRs{}, &networkingv1alpha1.RemappedCIDRs{}
	meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: networkingv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: networkingv1alpha1.ReasonConnected})
	clustertest.Must(t, c.Status().Update(ctx, nc))
}

// wantPeers checks that the gateway's file holds links with exactly peers.
func wantPeers(file string, peers ...string) error {
	got, err := filePeers(file)
	if err != nil {
		return err
	}
	if !slices.Equal(got, peers) {
		return fmt.Errorf("links with %v, want %v", got, peers)
	}
	return nil
}

func filePeers(file string) ([]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	cfg, err := gateway.ParseConfig(data)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range cfg.Links {
		out = append(out, l.Peer)
	}
	return out, nil
}
