package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/controller/linkgc"
	"github.com/annexhq/annex/internal/gateway"
)

// The teardown attempts: a provider's gateway must never accept, on the
// link with a tenant, more than that tenant had, whatever point an
// unpeering stops at or in whatever order a hostile consumer ends it. They
// read what the provider's agent writes for its gateway (the agent is
// restarted with --gateway-config when it runs without; no gateway needs
// to run) and give the link a tunnel when it has none (a peering made
// while no gateway ran), so that the link is rendered with its accept
// list. They end the peering on the provider: run them last, and unpeer
// afterwards (linkWithoutPeeringClosed leaves the tenant's namespace and
// credentials, so a plain `unpeer --remote-kubeconfig` cleans up;
// goodbyeTakesTheLinkFirst removes the tenant, so the consumer then needs
// `unpeer <provider> --force`).

// linkWithoutPeeringClosed is the attempt "an unpeer stopped right after
// the provider's ForeignCluster went": what an unpeering of the old order
// (provider side first, the link last) left when it was killed there, or a
// ForeignCluster deleted by hand. The provider's gateway must stop
// accepting anything on the link with consumer at once — never every
// tenant's pods, as a link for direct connections gets; forbidden are
// addresses the consumer never had (another tenant's pods) — and its agent
// must delete the link on its own, with a Warning Event LinkRemoved.
func linkWithoutPeeringClosed(ctx context.Context, t *testing.T, provider *testAgent, admin client.Client, consumer string, forbidden []string) error {
	file, err := gatewayConfigOf(ctx, t, provider, admin, consumer)
	if err != nil {
		return err
	}
	start := time.Now()
	// The stop itself leaves the link without its ForeignCluster: what
	// matters is what the gateway accepts meanwhile.
	w := watchLink(ctx, file, admin, consumer, forbidden, false)
	defer func() { _ = w.stop() }() // on the early returns; the others report what it saw
	if err := admin.Delete(ctx, &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: consumer}}); err != nil {
		return fmt.Errorf("delete the provider's ForeignCluster %s: %w", consumer, err)
	}
	if err := until(20*time.Second, func() error { return linkGone(ctx, file, admin, consumer) }); err != nil {
		return errors.Join(fmt.Errorf("the link without its peering: %w", err), w.stop())
	}
	if err := until(10*time.Second, func() error { return linkRemovedEvent(ctx, admin, consumer, start) }); err != nil {
		return errors.Join(err, w.stop())
	}
	return w.stop()
}

// goodbyeTakesTheLinkFirst is the attempt "the consumer releases its
// heartbeat without unpeering its side" (what `unpeer` does last, done
// first by a hostile consumer, with the tenant's credential only): the
// provider removes the tenant at once, and the link must go first — never
// a moment where the provider has the link and no ForeignCluster for the
// consumer, and never an address of forbidden accepted on it.
func goodbyeTakesTheLinkFirst(ctx context.Context, t *testing.T, provider *testAgent, tenant, admin client.Client, consumer string, forbidden []string) error {
	file, err := gatewayConfigOf(ctx, t, provider, admin, consumer)
	if err != nil {
		return err
	}
	w := watchLink(ctx, file, admin, consumer, forbidden, true)
	defer func() { _ = w.stop() }() // on the early returns; the others report what it saw
	tenantNS := corev1alpha1.TenantNamespaceName(consumer)
	released, _ := json.Marshal(map[string]any{"spec": map[string]any{"renewTime": metav1.NewMicroTime(time.Unix(corev1alpha1.HeartbeatReleasedUnix, 0))}})
	if err := tenant.Patch(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: corev1alpha1.HeartbeatLeaseName}},
		client.RawPatch("application/merge-patch+json", released)); err != nil {
		return fmt.Errorf("release the heartbeat with the tenant's credential: %w", err)
	}
	if err := until(30*time.Second, func() error {
		if err := linkGone(ctx, file, admin, consumer); err != nil {
			return err
		}
		if err := admin.Get(ctx, client.ObjectKey{Name: consumer}, &corev1alpha1.ForeignCluster{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("ForeignCluster %s still there (%v)", consumer, err)
		}
		ns := &corev1.Namespace{}
		if err := admin.Get(ctx, client.ObjectKey{Name: tenantNS}, ns); err == nil && ns.DeletionTimestamp.IsZero() {
			return fmt.Errorf("tenant namespace %s not being deleted", tenantNS)
		}
		return nil
	}); err != nil {
		return errors.Join(fmt.Errorf("the tenant that said goodbye: %w", err), w.stop())
	}
	return w.stop()
}

// gatewayConfigOf makes provider's agent render its gateway's file (it is
// restarted with --gateway-config if it runs without), gives the link with
// consumer a tunnel if it has none, waits until the file holds that link
// and returns the file's path.
func gatewayConfigOf(ctx context.Context, t *testing.T, provider *testAgent, admin client.Client, consumer string) (string, error) {
	t.Helper()
	file := filepath.Join(provider.cluster.Dir(), "gateway", "attack-config.json")
	if !slices.ContainsFunc(provider.args, func(a string) bool { return strings.HasPrefix(a, "--gateway-config") }) {
		provider.args = append(provider.args, "--gateway-config="+file, "--gateway-endpoint=127.0.0.1")
		// Stopped, not killed: it releases its leader Lease, so the new one
		// leads (and renders) at once.
		if err := provider.agent.Stop(); err != nil {
			return "", err
		}
		provider.start(t)
	} else {
		for _, a := range provider.args {
			if v, ok := strings.CutPrefix(a, "--gateway-config="); ok {
				file = v
			}
		}
	}
	nc := &networkingv1alpha1.NetworkConfiguration{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: consumer}, nc); err != nil {
		return "", fmt.Errorf("the provider's link with %s: %w", consumer, err)
	}
	if nc.Spec.Tunnel == nil {
		priv, err := gateway.GenerateKey()
		if err != nil {
			return "", err
		}
		pub, err := priv.Public()
		if err != nil {
			return "", err
		}
		patch := client.MergeFrom(nc.DeepCopy())
		nc.Spec.Tunnel = &networkingv1alpha1.TunnelSpec{ListenPort: networkingv1alpha1.DefaultTunnelPort,
			RemotePublicKey: pub.String(), RemoteEndpoint: "192.0.2.1:51820"} // nothing answers there: only the file matters
		if err := admin.Patch(ctx, nc, patch); err != nil {
			return "", fmt.Errorf("give the link with %s a tunnel: %w", consumer, err)
		}
	}
	err := until(60*time.Second, func() error {
		_, ok, err := linkAccept(file, consumer)
		if err == nil && !ok {
			err = fmt.Errorf("no link with %s in %s", consumer, file)
		}
		return err
	})
	return file, err
}

// linkAccept is what the link with peer accepts in the gateway's file;
// ok is false when the file has no link with peer.
func linkAccept(file, peer string) (accept []netip.Prefix, ok bool, err error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, false, err
	}
	cfg, err := gateway.ParseConfig(data)
	if err != nil {
		return nil, false, fmt.Errorf("the agent wrote a file the gateway refuses: %w", err)
	}
	for _, l := range cfg.Links {
		if l.Peer == peer {
			return l.Accept, true, nil
		}
	}
	return nil, false, nil
}

// linkGone checks that the link with peer is in neither the gateway's file
// nor the API server.
func linkGone(ctx context.Context, file string, admin client.Client, peer string) error {
	if _, ok, err := linkAccept(file, peer); err != nil || ok {
		return fmt.Errorf("the gateway's file still has the link with %s (%v)", peer, err)
	}
	err := admin.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: peer}, &networkingv1alpha1.NetworkConfiguration{})
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("NetworkConfiguration %s/%s still there (%v)", corev1alpha1.AgentNamespace, peer, err)
	}
	return nil
}

// linkRemovedEvent finds the provider's Warning Event LinkRemoved about its
// link with peer, made since start.
func linkRemovedEvent(ctx context.Context, admin client.Client, peer string, since time.Time) error {
	evs := &eventsv1.EventList{}
	if err := admin.List(ctx, evs, client.InNamespace(corev1alpha1.AgentNamespace)); err != nil {
		return err
	}
	for _, e := range evs.Items {
		if e.Reason == linkgc.EventLinkRemoved && e.Type == corev1.EventTypeWarning && e.Regarding.Name == peer &&
			!e.CreationTimestamp.Time.Before(since.Truncate(time.Second)) {
			return nil
		}
	}
	return fmt.Errorf("no Warning Event %s about the link with %s among %d Events", linkgc.EventLinkRemoved, peer, len(evs.Items))
}

// linkWatch samples, until stopped, the gateway's file and the API server
// for a link with peer that accepts a forbidden address, or (when ordered)
// that exists without the ForeignCluster it was made for.
type linkWatch struct {
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	mu     sync.Mutex
	seen   []string
	checks int
}

func watchLink(ctx context.Context, file string, admin client.Client, peer string, forbidden []string, ordered bool) *linkWatch {
	w := &linkWatch{done: make(chan struct{})}
	var bad []netip.Addr
	for _, f := range forbidden {
		if a, err := netip.ParseAddr(f); err == nil {
			bad = append(bad, a)
		}
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			select {
			case <-w.done:
				return
			case <-time.After(25 * time.Millisecond):
			}
			w.check(ctx, file, admin, peer, bad, ordered)
		}
	}()
	return w
}

// check samples once. The ForeignCluster is read before the link: a link
// still there after its ForeignCluster was seen gone was there without it.
func (w *linkWatch) check(ctx context.Context, file string, admin client.Client, peer string, bad []netip.Addr, ordered bool) {
	var seen []string
	if ordered {
		fcErr := admin.Get(ctx, client.ObjectKey{Name: peer}, &corev1alpha1.ForeignCluster{})
		ncErr := admin.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: peer}, &networkingv1alpha1.NetworkConfiguration{})
		if apierrors.IsNotFound(fcErr) && ncErr == nil {
			seen = append(seen, "the NetworkConfiguration was there without its ForeignCluster")
		}
	}
	if accept, ok, err := linkAccept(file, peer); err == nil && ok {
		for _, p := range accept {
			for _, a := range bad {
				if p.Contains(a) {
					seen = append(seen, fmt.Sprintf("the gateway accepted %s on the link (%s), an address the tenant never had", a, p))
				}
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checks++
	for _, s := range seen {
		if !slices.Contains(w.seen, s) {
			w.seen = append(w.seen, s)
		}
	}
}

// stop ends the sampling and says what it saw that must not be.
func (w *linkWatch) stop() error {
	w.once.Do(func() { close(w.done) })
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen) > 0 {
		return fmt.Errorf("in %d samples: %s", w.checks, strings.Join(w.seen, "; "))
	}
	if w.checks == 0 {
		return errors.New("the link was never sampled")
	}
	return nil
}

// until polls cond every 100 ms until it returns nil or timeout passes.
func until(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
