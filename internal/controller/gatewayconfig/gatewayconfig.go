// Package gatewayconfig owns the agent's side of the data plane. When the
// agent runs with a gateway (--gateway-config), it keeps this cluster's
// WireGuard private key in a Secret (created once, never sent anywhere),
// publishes the public key and the gateway's address in a ConfigMap for
// `annexctl network connect` to copy to peers, renders the gateway's
// configuration file from the NetworkConfigurations and the transit
// addresses of offloaded pods (Render), and reports each tunnel's state
// from the gateway's status file into its NetworkConfiguration
// (condition TunnelConnected, status.tunnel). annex-gateway programs the
// network namespace from that file (internal/gateway).
package gatewayconfig

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	"github.com/annexhq/annex/internal/gateway"
	"github.com/annexhq/annex/internal/netview"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create,namespace=annex-system
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;patch,namespace=annex-system
// +kubebuilder:rbac:groups=networking.annex.dev,resources=networkconfigurations,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.annex.dev,resources=networkconfigurations/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

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
}

// Enabled says whether the agent runs with a gateway.
func (o Options) Enabled() bool { return o.ConfigPath != "" }

// Validate checks the flags.
func (o Options) Validate() error {
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
)

// Reconciler renders the gateway's configuration and reports its tunnels.
type Reconciler struct {
	client client.Client
	api    client.Reader
	opts   Options
	local  Local // PrivateKey filled in by ensureKey
	clock  clock.Clock

	mu         sync.Mutex
	keyReady   bool
	written    []byte
	countersAt map[string]time.Time // by NetworkConfiguration name
}

// New returns the Reconciler. c reads NetworkConfigurations, pods and
// ForeignClusters from the cache and patches NetworkConfiguration status;
// api reads the key Secret and ConfigMap directly.
func New(c client.Client, api client.Reader, opts Options, podCIDR, externalCIDR netip.Prefix, clk clock.Clock) *Reconciler {
	if opts.Interval <= 0 {
		opts.Interval = 2 * time.Second
	}
	return &Reconciler{client: c, api: api, opts: opts, clock: clk,
		local: Local{PodCIDR: podCIDR, ExternalCIDR: externalCIDR}, countersAt: map[string]time.Time{}}
}

// the single request every event maps to: the file is one whole.
var theRequest = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: corev1alpha1.AgentNamespace, Name: "gateway"}}

// Reconcile writes the configuration file when it changed and reports the
// tunnels; it runs again every Interval to follow the status file.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (ctrl.Result, error) {
	if err := r.ensureKey(ctx); err != nil {
		return ctrl.Result{}, err
	}
	ncs := &networkingv1alpha1.NetworkConfigurationList{}
	if err := r.client.List(ctx, ncs, client.InNamespace(corev1alpha1.AgentNamespace)); err != nil {
		return ctrl.Result{}, err
	}
	nodes, err := netview.VirtualNodes(ctx, r.client)
	if err != nil {
		return ctrl.Result{}, err
	}
	var pods []corev1.Pod
	if r.local.ExternalCIDR.IsValid() && len(nodes) > 0 {
		list := &corev1.PodList{}
		if err := r.client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return ctrl.Result{}, err
		}
		pods = list.Items
	}
	cfg, skipped := Render(r.local, ncs.Items, pods, nodes)
	for name, why := range skipped {
		ctrl.LoggerFrom(ctx).Error(errors.New(why), "Link left out of the gateway configuration", "networkConfiguration", name)
	}
	if err := r.write(ctx, cfg); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.report(ctx, ncs.Items); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: r.opts.Interval}, nil
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
	if err := os.MkdirAll(filepath.Dir(r.opts.ConfigPath), 0o755); err != nil {
		return err
	}
	tmp := r.opts.ConfigPath + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil { // it holds the private key
		return fmt.Errorf("write the gateway configuration: %w", err)
	}
	if err := os.Rename(tmp, r.opts.ConfigPath); err != nil {
		return fmt.Errorf("write the gateway configuration: %w", err)
	}
	r.written = data
	transit := 0
	for _, l := range cfg.Links {
		transit += len(l.Transit)
	}
	ctrl.LoggerFrom(ctx).Info("Wrote the gateway configuration", "path", r.opts.ConfigPath, "links", len(cfg.Links), "transitAddresses", transit)
	return nil
}

// report copies the gateway's status file into the NetworkConfigurations,
// writing only what changed (the byte counters at most every
// countersRefresh).
func (r *Reconciler) report(ctx context.Context, ncs []networkingv1alpha1.NetworkConfiguration) error {
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
		if !needsWrite(nc, cond, tun, now.Time.Sub(countersAt) >= countersRefresh) {
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

// SetupWithManager registers the controller "gatewayconfig": every
// NetworkConfiguration change and every change of a pod with a transit
// address triggers a render.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{theRequest}
	})
	hasTransit := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetAnnotations()[corev1alpha1.AnnotationTransitAddress]
		return ok
	})
	// One event at start: the key and the ConfigMap are made, and the file
	// written, even before there is any link.
	start := make(chan event.GenericEvent, 1)
	start <- event.GenericEvent{Object: &corev1.ConfigMap{}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("gatewayconfig").
		WatchesRawSource(source.Channel(start, all)).
		Watches(&networkingv1alpha1.NetworkConfiguration{}, all).
		Watches(&corev1.Pod{}, all, builder.WithPredicates(hasTransit)).
		Watches(&corev1alpha1.ForeignCluster{}, all).
		Complete(r)
}
