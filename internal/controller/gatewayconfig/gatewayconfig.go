// Package gatewayconfig owns the agent's side of the data plane. When the
// agent runs with a gateway (--gateway-config), it keeps this cluster's
// WireGuard private key in a Secret (created once, never sent anywhere),
// publishes the public key and the gateway's address in a ConfigMap for
// `annexctl network connect` to copy to peers, renders the gateway's
// configuration file from the NetworkConfigurations, the transit addresses
// of offloaded pods and, per link, what the peer may open connections to
// (Render, PeerAccess: by default the pods of its own remote namespaces
// here), and reports each tunnel's state from the gateway's status file
// into its NetworkConfiguration (condition TunnelConnected,
// status.tunnel). annex-gateway programs the network namespace from that
// file (internal/gateway).
//
// A link whose peer claims CIDRs that are not private ranges, that cover
// this cluster's service CIDR or a node's address, that differ from the
// ones agreed when the link was made, or whose ranges as this cluster sees
// them overlap its own pod or external CIDR, is not programmed
// (netview.CheckLink): TunnelConnected says CIDRRefused with the rule, and
// a Warning Event RemoteCIDRRefused goes to the NetworkConfiguration.
//
// A link is programmed only while this cluster peers with its remote
// cluster (has a ForeignCluster for it), unless the link says it is for
// direct connections (label annex.dev/link-purpose=direct): a link of a
// peering that is gone, or one that does not say what it is for, would
// otherwise give its peer what a direct connection gets, every tenant's
// pods. It is left out at once (TunnelConnected NoPeering, Warning Event
// LinkWithoutPeering), whatever order the deletions of an unpeering reach
// the cache in; the linkgc controller deletes a peering's link.
//
// The file is rendered at most once per second (renderEvery): a burst of
// pod changes costs one write per second, and a new tenant pod is
// reachable from its peer about a second after the agent's cache sees its
// IP (plus the gateway's 250 ms look at the file).
package gatewayconfig

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/gateway"
	"github.com/annexhq/annex/internal/netview"
	"github.com/annexhq/annex/internal/network"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create,namespace=annex-system
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;patch,namespace=annex-system
// +kubebuilder:rbac:groups=networking.annex.dev,resources=networkconfigurations,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.annex.dev,resources=networkconfigurations/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=pods;namespaces;nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=namespaceoffloadings,verbs=get;list;watch

// Options configure the gateway side of the agent.
type Options struct {
	// ConfigPath is the file the agent writes for annex-gateway; empty
	// disables everything in this package.
	ConfigPath string
	// StatusPath is the file annex-gateway writes its links' state to.
	StatusPath string
	// Address is the IP the gateway's UDP ports are reachable at from the
	// other clusters' gateways.
	Address string
	// Interval is how often the status file is read (default 2s).
	Interval time.Duration
	// PeerAccess says what peers may open connections to (default
	// PeerAccessTenant).
	PeerAccess PeerAccess
}

// BindFlags registers --gateway-config, --gateway-status and
// --gateway-endpoint.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ConfigPath, "gateway-config", o.ConfigPath,
		"run with a gateway: write its configuration (links, keys, translations, transit addresses) to this file for annex-gateway --config; empty: no gateway, network links stay bookkeeping")
	fs.StringVar(&o.StatusPath, "gateway-status", o.StatusPath,
		"the file annex-gateway --status writes; its tunnels' state goes into the NetworkConfigurations (condition TunnelConnected)")
	fs.StringVar(&o.Address, "gateway-endpoint", o.Address,
		"the IP address other clusters' gateways reach this cluster's gateway at (required with --gateway-config)")
	if o.PeerAccess == "" {
		o.PeerAccess = PeerAccessTenant
	}
	fs.Var((*peerAccessValue)(&o.PeerAccess), "gateway-peer-access",
		"what a peer may open connections to through the gateway: tenant (the pods of its own remote namespaces here; a provider also the pods of the namespaces offloaded to it and their transit addresses; a peer linked only for direct connections the pods of every tenant) or all (this cluster's whole pod CIDR and every transit address)")
}

// peerAccessValue is --gateway-peer-access.
type peerAccessValue PeerAccess

func (v *peerAccessValue) String() string { return string(*v) }
func (v *peerAccessValue) Type() string   { return "tenant|all" }
func (v *peerAccessValue) Set(s string) error {
	switch PeerAccess(s) {
	case PeerAccessTenant, PeerAccessAll:
		*v = peerAccessValue(s)
		return nil
	}
	return fmt.Errorf("must be %q or %q", PeerAccessTenant, PeerAccessAll)
}

// Enabled says whether the agent runs with a gateway.
func (o Options) Enabled() bool { return o.ConfigPath != "" }

// Validate checks the flags.
func (o Options) Validate() error {
	switch o.PeerAccess {
	case "", PeerAccessTenant, PeerAccessAll:
	default:
		return fmt.Errorf("--gateway-peer-access must be %q or %q, got %q", PeerAccessTenant, PeerAccessAll, o.PeerAccess)
	}
	if !o.Enabled() {
		if o.StatusPath != "" || o.Address != "" {
			return errors.New("--gateway-status and --gateway-endpoint need --gateway-config")
		}
		return nil
	}
	if a, err := netip.ParseAddr(o.Address); err != nil || !a.Is4() {
		return fmt.Errorf("--gateway-endpoint must be an IPv4 address, got %q", o.Address)
	}
	return nil
}

const (
	// handshakeMaxAge: WireGuard renews a session's handshake every two
	// minutes while packets flow (the gateway keeps them flowing with a
	// keepalive every 10 s); older than three minutes means it stopped.
	handshakeMaxAge = 180.0
	// countersRefresh is how often at most the byte counters alone are
	// written into status.tunnel.
	countersRefresh = time.Minute
	// renderEvery is how often at most the configuration is rendered (and
	// the file written): the changes of a burst of pods within it are
	// written together, at its end.
	renderEvery = time.Second
)

// Reconciler renders the gateway's configuration and reports its tunnels.
type Reconciler struct {
	client   client.Client
	api      client.Reader
	recorder events.EventRecorder
	opts     Options
	local    Local // PrivateKey filled in by ensureKey, Ranges.Nodes by each render
	clock    clock.Clock

	mu         sync.Mutex
	keyReady   bool
	written    []byte
	writes     int                  // files written, for tests
	renderedAt time.Time            // the last render
	countersAt map[string]time.Time // by NetworkConfiguration name
	refused    map[string]string    // by NetworkConfiguration name: the refusal last reported
}

// Cluster is this cluster's own ranges (from its identity).
type Cluster struct {
	PodCIDR, ServiceCIDR netip.Prefix
	ExternalCIDR         netip.Prefix // invalid: none, no transit
}

// New returns the Reconciler. c reads NetworkConfigurations, pods,
// namespaces, NamespaceOffloadings, nodes and ForeignClusters from the
// cache and patches NetworkConfiguration status; api reads the key Secret
// and ConfigMap directly; recorder receives the refusals of peers' CIDRs.
func New(c client.Client, api client.Reader, recorder events.EventRecorder, opts Options, cluster Cluster, clk clock.Clock) *Reconciler {
	if opts.Interval <= 0 {
		opts.Interval = 2 * time.Second
	}
	if opts.PeerAccess == "" {
		opts.PeerAccess = PeerAccessTenant
	}
	return &Reconciler{client: c, api: api, recorder: recorder, opts: opts, clock: clk,
		local: Local{PodCIDR: cluster.PodCIDR, ExternalCIDR: cluster.ExternalCIDR,
			Ranges: network.LocalRanges{ServiceCIDR: cluster.ServiceCIDR, Own: ownRanges(cluster)}},
		countersAt: map[string]time.Time{}, refused: map[string]string{}}
}

// ownRanges are the cluster's pod and external CIDRs, those it knows: no
// link may route them into a peer (network.CheckOwn).
func ownRanges(c Cluster) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []netip.Prefix{c.PodCIDR, c.ExternalCIDR} {
		if p.IsValid() {
			out = append(out, p.Masked())
		}
	}
	return out
}

// the single request every event maps to: the file is one whole.
var theRequest = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: corev1alpha1.AgentNamespace, Name: "gateway"}}

// Reconcile writes the configuration file when it changed and reports the
// tunnels; it runs again every Interval to follow the status file. It
// renders at most every renderEvery: called sooner, it only asks to be
// called again when that time is up.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (ctrl.Result, error) {
	now := r.clock.Now()
	r.mu.Lock()
	wait := r.renderedAt.Add(renderEvery).Sub(now)
	if r.renderedAt.IsZero() || wait <= 0 {
		r.renderedAt = now
	}
	r.mu.Unlock()
	if wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err := r.ensureKey(ctx); err != nil {
		return ctrl.Result{}, err
	}
	st, err := r.state(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	cfg, skipped := Render(r.local, st, r.opts.PeerAccess)
	r.reportRefusals(ctx, st.NetworkConfigurations, skipped)
	if err := r.write(ctx, cfg); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.report(ctx, st.NetworkConfigurations, skipped); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: r.opts.Interval}, nil
}

// state reads what Render needs from the cache.
func (r *Reconciler) state(ctx context.Context) (State, error) {
	var st State
	ncs := &networkingv1alpha1.NetworkConfigurationList{}
	if err := r.client.List(ctx, ncs, client.InNamespace(corev1alpha1.AgentNamespace)); err != nil {
		return st, err
	}
	st.NetworkConfigurations = ncs.Items
	if len(ncs.Items) == 0 {
		return st, nil // no link: nothing else matters
	}
	nodes := &corev1.NodeList{}
	if err := r.client.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return st, err
	}
	r.local.Ranges.Nodes = netview.NodeAddresses(nodes.Items)
	fcs := &corev1alpha1.ForeignClusterList{}
	if err := r.client.List(ctx, fcs); err != nil {
		return st, err
	}
	st.VirtualNodes = map[string]string{}
	st.Roles = map[string]corev1alpha1.PeeringRole{}
	for _, fc := range fcs.Items {
		id := fc.Spec.ClusterID
		if id == "" {
			continue
		}
		st.VirtualNodes[corev1alpha1.VirtualNodeName(id)] = id
		if fc.DeletionTimestamp.IsZero() { // a peering being removed is none
			st.Roles[id] = fc.Status.Role
		}
	}
	// Pods matter for transit addresses (pods on virtual nodes) and for
	// what peers may reach (unless they reach everything).
	if r.opts.PeerAccess == PeerAccessAll && (!r.local.ExternalCIDR.IsValid() || len(st.VirtualNodes) == 0) {
		return st, nil
	}
	pods := &corev1.PodList{}
	if err := r.client.List(ctx, pods, client.UnsafeDisableDeepCopy); err != nil {
		return st, err
	}
	st.Pods = pods.Items
	if r.opts.PeerAccess == PeerAccessAll {
		return st, nil
	}
	nss := &corev1.NamespaceList{}
	if err := r.client.List(ctx, nss, client.MatchingLabels{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}, client.UnsafeDisableDeepCopy); err != nil {
		return st, err
	}
	st.RemoteNamespaces = map[string]string{}
	for _, ns := range nss.Items {
		if _, tenant := ns.Labels[corev1alpha1.LabelTenant]; tenant {
			continue // a peering's own namespace (annex-tenant-<peer>), not a remote namespace
		}
		if id := ns.Labels[corev1alpha1.LabelRemoteClusterID]; id != "" {
			st.RemoteNamespaces[ns.Name] = id
		}
	}
	nsos := &offloadingv1alpha1.NamespaceOffloadingList{}
	if err := r.client.List(ctx, nsos, client.UnsafeDisableDeepCopy); err != nil {
		return st, err
	}
	st.Offloaded = map[string][]string{}
	for _, nso := range nsos.Items {
		for _, e := range nso.Status.RemoteNamespaces {
			if e.ClusterID != "" {
				st.Offloaded[nso.Namespace] = append(st.Offloaded[nso.Namespace], e.ClusterID)
			}
		}
	}
	return st, nil
}

// reportRefusals records a Warning Event on each NetworkConfiguration whose
// CIDRs were refused or whose peering is gone, once per refusal (again when
// it changes), and logs every link left out.
func (r *Reconciler) reportRefusals(ctx context.Context, ncs []networkingv1alpha1.NetworkConfiguration, skipped map[string]error) {
	log := ctrl.LoggerFrom(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range ncs {
		nc := &ncs[i]
		err, ok := skipped[nc.Name]
		if !ok {
			delete(r.refused, nc.Name)
			continue
		}
		msg := err.Error()
		if r.refused[nc.Name] == msg {
			continue
		}
		r.refused[nc.Name] = msg
		log.Error(err, "Link left out of the gateway configuration", "networkConfiguration", client.ObjectKeyFromObject(nc))
		if reason := eventReason(err); reason != "" && r.recorder != nil {
			r.recorder.Eventf(nc, nil, corev1.EventTypeWarning, reason, "Refuse", "%s", msg)
		}
	}
}

// The reasons of the Warning Events on a NetworkConfiguration the agent
// does not program.
const (
	// EventCIDRRefused: the peer's CIDRs were refused.
	EventCIDRRefused = "RemoteCIDRRefused"
	// EventLinkWithoutPeering: this cluster no longer peers with the remote
	// cluster (netview.CheckPeering).
	EventLinkWithoutPeering = "LinkWithoutPeering"
)

// eventReason is the reason of the Warning Event for a link left out with
// err, "" when it gets none.
func eventReason(err error) string {
	var claim *network.ClaimError
	var peering *netview.PeeringError
	switch {
	case errors.As(err, &claim):
		return EventCIDRRefused
	case errors.As(err, &peering):
		return EventLinkWithoutPeering
	}
	return ""
}

// ensureKey loads the private key from the Secret, creating both the
// Secret and the published ConfigMap the first time.
func (r *Reconciler) ensureKey(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keyReady {
		return nil
	}
	key := client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: networkingv1alpha1.GatewaySecretName}
	sec := &corev1.Secret{}
	err := r.api.Get(ctx, key, sec)
	if apierrors.IsNotFound(err) {
		priv, gerr := gateway.GenerateKey()
		if gerr != nil {
			return gerr
		}
		sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}},
			Data: map[string][]byte{networkingv1alpha1.GatewayPrivateKey: []byte(priv.String())}}
		if err = r.client.Create(ctx, sec); apierrors.IsAlreadyExists(err) {
			err = r.api.Get(ctx, key, sec)
		}
		if err == nil {
			ctrl.LoggerFrom(ctx).Info("Generated the gateway's key", "secret", key)
		}
	}
	if err != nil {
		return fmt.Errorf("gateway key Secret %s: %w", key, err)
	}
	if err := r.local.PrivateKey.UnmarshalText(sec.Data[networkingv1alpha1.GatewayPrivateKey]); err != nil {
		return fmt.Errorf("gateway key Secret %s, key %s: %w", key, networkingv1alpha1.GatewayPrivateKey, err)
	}
	pub, err := r.local.PrivateKey.Public()
	if err != nil {
		return err
	}
	if err := r.publish(ctx, pub); err != nil {
		return err
	}
	r.keyReady = true
	return nil
}

// publish makes the ConfigMap say pub and the gateway's address.
func (r *Reconciler) publish(ctx context.Context, pub gateway.Key) error {
	want := map[string]string{networkingv1alpha1.GatewayPublicKey: pub.String(), networkingv1alpha1.GatewayAddress: r.opts.Address}
	key := client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: networkingv1alpha1.GatewayConfigMapName}
	cm := &corev1.ConfigMap{}
	err := r.api.Get(ctx, key, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}}, Data: want}
		return client.IgnoreAlreadyExists(r.client.Create(ctx, cm))
	case err != nil:
		return fmt.Errorf("gateway ConfigMap %s: %w", key, err)
	}
	if cm.Data[networkingv1alpha1.GatewayPublicKey] == want[networkingv1alpha1.GatewayPublicKey] &&
		cm.Data[networkingv1alpha1.GatewayAddress] == want[networkingv1alpha1.GatewayAddress] {
		return nil
	}
	patch := client.MergeFrom(cm.DeepCopy())
	cm.Data = want
	return r.client.Patch(ctx, cm, patch)
}

// write replaces the configuration file (atomically) when cfg differs from
// what it holds.
func (r *Reconciler) write(ctx context.Context, cfg gateway.Config) error {
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if bytes.Equal(data, r.written) {
		return nil
	}
	if old, err := os.ReadFile(r.opts.ConfigPath); err == nil && bytes.Equal(old, data) {
		r.written = data
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(r.opts.ConfigPath), 0o755); err != nil { //nolint:gosec // G301: the file in it is 0640
		return err
	}
	tmp := r.opts.ConfigPath + ".tmp"
	// It holds the private key: readable by the agent's user and group
	// only; the gateway, root without CAP_DAC_OVERRIDE in the agent's
	// pod, reads it through the group (the chart's runAsGroup).
	if err := os.WriteFile(tmp, data, 0o640); err != nil { //nolint:gosec // G306: see above
		return fmt.Errorf("write the gateway configuration: %w", err)
	}
	if err := os.Rename(tmp, r.opts.ConfigPath); err != nil {
		return fmt.Errorf("write the gateway configuration: %w", err)
	}
	r.written = data
	r.writes++
	transit := 0
	for _, l := range cfg.Links {
		transit += len(l.Transit)
	}
	accept := 0
	for _, l := range cfg.Links {
		accept += len(l.Accept)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Wrote the gateway configuration", "path", r.opts.ConfigPath, "links", len(cfg.Links), "transitAddresses", transit, "acceptEntries", accept)
	return nil
}

// report copies the gateway's status file into the NetworkConfigurations,
// writing only what changed (the byte counters at most every
// countersRefresh).
func (r *Reconciler) report(ctx context.Context, ncs []networkingv1alpha1.NetworkConfiguration, skipped map[string]error) error {
	now := metav1.NewTime(r.clock.Now())
	byPeer := map[string]*gateway.LinkStatus{}
	fresh := false
	if r.opts.StatusPath != "" {
		if fi, err := os.Stat(r.opts.StatusPath); err == nil && now.Sub(fi.ModTime()) < 3*r.opts.Interval+5*time.Second {
			var sts []gateway.LinkStatus
			if data, err := os.ReadFile(r.opts.StatusPath); err == nil && json.Unmarshal(data, &sts) == nil {
				fresh = true
				for i := range sts {
					byPeer[sts[i].Peer] = &sts[i]
				}
			}
		}
	}
	var errs []error
	for i := range ncs {
		nc := &ncs[i]
		if !nc.DeletionTimestamp.IsZero() {
			continue
		}
		st := byPeer[nc.Spec.RemoteClusterID]
		cond := tunnelCondition(nc.Spec.Tunnel != nil, fresh, st, now, handshakeMaxAge)
		if err, ok := skipped[nc.Name]; ok {
			cond = skippedCondition(err)
		}
		var tun *networkingv1alpha1.TunnelStatus
		if st != nil && fresh {
			tun = &networkingv1alpha1.TunnelStatus{RxBytes: st.RxBytes, TxBytes: st.TxBytes}
			if !st.LastHandshake.IsZero() {
				t := metav1.NewTime(st.LastHandshake)
				tun.LastHandshake = &t
			}
		} else {
			tun = nc.Status.Tunnel // keep the last report
		}
		r.mu.Lock()
		countersAt := r.countersAt[nc.Name]
		r.mu.Unlock()
		if !needsWrite(nc, cond, tun, now.Sub(countersAt) >= countersRefresh) {
			continue
		}
		patch := client.MergeFromWithOptions(nc.DeepCopy(), client.MergeFromWithOptimisticLock{})
		meta.SetStatusCondition(&nc.Status.Conditions, cond)
		nc.Status.Tunnel = tun
		if err := r.client.Status().Patch(ctx, nc, patch); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("status of NetworkConfiguration %s: %w", nc.Name, err))
			}
			continue
		}
		r.mu.Lock()
		r.countersAt[nc.Name] = now.Time
		r.mu.Unlock()
	}
	return errors.Join(errs...)
}

// needsWrite says whether the link's status must be written: the condition
// or the last handshake changed, or the byte counters changed and
// countersDue (they were last written countersRefresh ago or longer).
func needsWrite(nc *networkingv1alpha1.NetworkConfiguration, cond metav1.Condition, tun *networkingv1alpha1.TunnelStatus, countersDue bool) bool {
	old := meta.FindStatusCondition(nc.Status.Conditions, cond.Type)
	if old == nil || old.Status != cond.Status || old.Reason != cond.Reason || old.Message != cond.Message {
		return true
	}
	prev := nc.Status.Tunnel
	switch {
	case (prev == nil) != (tun == nil):
		return true
	case tun == nil:
		return false
	case !prev.LastHandshake.Equal(tun.LastHandshake):
		return true
	}
	return countersDue && (prev.RxBytes != tun.RxBytes || prev.TxBytes != tun.TxBytes)
}

// skippedCondition is TunnelConnected for a link the agent left out.
func skippedCondition(err error) metav1.Condition {
	c := metav1.Condition{Type: networkingv1alpha1.ConditionTunnelConnected, Status: metav1.ConditionFalse,
		Reason: networkingv1alpha1.ReasonInvalidLink, Message: "not programmed: " + err.Error()}
	var claim *network.ClaimError
	var peering *netview.PeeringError
	switch {
	case errors.As(err, &claim):
		c.Reason = networkingv1alpha1.ReasonCIDRRefused
	case errors.As(err, &peering):
		c.Reason = networkingv1alpha1.ReasonNoPeering
	}
	return c
}

// SetupWithManager registers the controller "gatewayconfig": a change of a
// NetworkConfiguration, a ForeignCluster or a NamespaceOffloading, of a
// pod's addresses, node, phase or transit address, of the labels of a
// namespace of Annex's, or of a node's addresses triggers a render (at
// most one per renderEvery).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{theRequest}
	})
	// One event at start: the key and the ConfigMap are made, and the file
	// written, even before there is any link.
	start := make(chan event.GenericEvent, 1)
	start <- event.GenericEvent{Object: &corev1.ConfigMap{}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("gatewayconfig").
		WatchesRawSource(source.Channel(start, all)).
		Watches(&networkingv1alpha1.NetworkConfiguration{}, all).
		Watches(&corev1.Pod{}, all, builder.WithPredicates(podPredicate)).
		Watches(&corev1.Namespace{}, all, builder.WithPredicates(namespacePredicate)).
		Watches(&corev1.Node{}, all, builder.WithPredicates(nodePredicate)).
		Watches(&offloadingv1alpha1.NamespaceOffloading{}, all).
		Watches(&corev1alpha1.ForeignCluster{}, all).
		Complete(r)
}

// podPredicate passes the pod changes a render depends on: a pod that has
// (or had) an address or a transit address appearing, going, or changing
// them, its node or its phase.
var podPredicate = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return podMatters(e.Object) },
	DeleteFunc: func(e event.DeleteEvent) bool { return podMatters(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Pod)
		n, ok2 := e.ObjectNew.(*corev1.Pod)
		if !ok1 || !ok2 {
			return true
		}
		return o.Status.PodIP != n.Status.PodIP || !slices.Equal(o.Status.PodIPs, n.Status.PodIPs) ||
			o.Status.Phase != n.Status.Phase || o.Spec.NodeName != n.Spec.NodeName ||
			o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() ||
			o.Annotations[corev1alpha1.AnnotationTransitAddress] != n.Annotations[corev1alpha1.AnnotationTransitAddress]
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func podMatters(o client.Object) bool {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return true
	}
	_, transit := p.Annotations[corev1alpha1.AnnotationTransitAddress]
	return p.Status.PodIP != "" || transit
}

// namespacePredicate passes the namespaces of Annex's (remote namespaces)
// appearing, going or changing labels.
var namespacePredicate = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return annexNamespace(e.Object) },
	DeleteFunc: func(e event.DeleteEvent) bool { return annexNamespace(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return (annexNamespace(e.ObjectOld) || annexNamespace(e.ObjectNew)) && !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func annexNamespace(o client.Object) bool {
	return o.GetLabels()[corev1alpha1.LabelManagedBy] == corev1alpha1.ManagedByAnnex
}

// nodePredicate passes nodes appearing, going or changing addresses (not
// their heartbeats).
var nodePredicate = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Node)
		n, ok2 := e.ObjectNew.(*corev1.Node)
		return !ok1 || !ok2 || !slices.Equal(o.Status.Addresses, n.Status.Addresses)
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}
