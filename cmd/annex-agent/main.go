// Command annex-agent runs Annex in one cluster: the controllers and the
// virtual nodes of every peering, in one leader-elected manager.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/agent"
	"github.com/annexhq/annex/internal/controller/credentials"
	"github.com/annexhq/annex/internal/controller/failover"
	"github.com/annexhq/annex/internal/controller/fairqueue"
	"github.com/annexhq/annex/internal/controller/fencing"
	"github.com/annexhq/annex/internal/controller/foreigncluster"
	"github.com/annexhq/annex/internal/controller/gatewayconfig"
	"github.com/annexhq/annex/internal/controller/heartbeat"
	"github.com/annexhq/annex/internal/controller/linkgc"
	"github.com/annexhq/annex/internal/controller/namespaceoffloading"
	"github.com/annexhq/annex/internal/controller/reflection"
	"github.com/annexhq/annex/internal/controller/remotenamespace"
	"github.com/annexhq/annex/internal/controller/replicator"
	"github.com/annexhq/annex/internal/controller/resourceslice"
	"github.com/annexhq/annex/internal/controller/shadowendpointslice"
	"github.com/annexhq/annex/internal/controller/shadowpod"
	"github.com/annexhq/annex/internal/controller/tenantgc"
	"github.com/annexhq/annex/internal/controller/tenantquota"
	"github.com/annexhq/annex/internal/controller/transit"
	"github.com/annexhq/annex/internal/identity"
	"github.com/annexhq/annex/internal/kubeletserver"
	"github.com/annexhq/annex/internal/netview"
	"github.com/annexhq/annex/internal/remote"
	"github.com/annexhq/annex/internal/version"
	"github.com/annexhq/annex/internal/virtualnode"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "annex-agent:", err)
		os.Exit(1)
	}
}

func run() error {
	opts := agent.DefaultOptions()
	remoteOpts := remote.DefaultOptions()
	var sliceOpts resourceslice.Options
	shadowPodOpts := shadowpod.DefaultOptions()
	remoteNSOpts := remotenamespace.DefaultOptions()
	var endpointOpts shadowendpointslice.Options
	vnOpts := virtualnode.DefaultOptions()
	kubeletOpts := kubeletserver.DefaultOptions()
	var gatewayOpts gatewayconfig.Options
	syncOpts := fairqueue.DefaultLimiterOptions()
	renewFraction := 2.0 / 3
	heartbeatInterval := 10 * time.Second
	tenantGrace := 15 * time.Minute
	logCfg := textlogger.NewConfig()

	fs := pflag.NewFlagSet("annex-agent", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "annex-agent %s runs Annex in one cluster: peering, offloading and virtual nodes.\n\nUsage: annex-agent [flags]\n\nFlags:\n%s", version.Version, fs.FlagUsages())
	}
	opts.BindFlags(fs)
	remoteOpts.BindFlags(fs)
	sliceOpts.BindFlags(fs)
	shadowPodOpts.BindFlags(fs)
	remoteNSOpts.BindFlags(fs)
	quotaOpts := tenantquota.DefaultOptions()
	quotaOpts.BindFlags(fs)
	endpointOpts.BindFlags(fs)
	vnOpts.BindFlags(fs)
	kubeletOpts.BindFlags(fs)
	gatewayOpts.BindFlags(fs)
	syncOpts.BindFlags(fs)
	fs.Float64Var(&renewFraction, "credentials-renew-fraction", renewFraction, "renew a peering token once this fraction of its lifetime has passed (0 < f < 1)")
	fs.DurationVar(&heartbeatInterval, "consumer-heartbeat-interval", heartbeatInterval, "how often this cluster, as a consumer, renews its heartbeat Lease on each provider (a namespace offloaded with failover needs fenceAfterSeconds of at least three intervals)")
	fs.DurationVar(&tenantGrace, "tenant-grace-period", tenantGrace, "how long this cluster, as a provider, keeps a tenant whose consumer stopped renewing its heartbeat before removing it and everything it offloaded")
	gofs := flag.NewFlagSet("log", flag.ContinueOnError)
	logCfg.AddFlags(gofs)
	fs.AddGoFlagSet(gofs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == pflag.ErrHelp {
			return nil
		}
		fmt.Fprintln(os.Stderr, "annex-agent:", err)
		os.Exit(2)
	}
	log := textlogger.NewLogger(logCfg)
	ctrl.SetLogger(log)
	klog.SetLogger(log)
	memLimit, err := agent.GoMemoryLimit(os.Getenv)
	if err != nil {
		return err
	}
	if memLimit > 0 {
		debug.SetMemoryLimit(memLimit)
		log.Info("Go memory limit set from the container's", "limitBytes", memLimit)
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	if err := remoteOpts.Validate(); err != nil {
		return err
	}
	if err := kubeletOpts.Validate(); err != nil {
		return err
	}
	if err := gatewayOpts.Validate(); err != nil {
		return err
	}
	if err := shadowPodOpts.Validate(); err != nil {
		return err
	}
	if err := syncOpts.Validate(); err != nil {
		return err
	}
	// One flag, --tenant-default-requests (shadowpod's): the agent applies
	// the defaults before its quota check, the LimitRange of every remote
	// namespace says the same.
	remoteNSOpts.DefaultRequests = shadowPodOpts.DefaultRequests.DeepCopy()
	if remoteNSOpts.DefaultRequests == nil {
		remoteNSOpts.DefaultRequests = corev1.ResourceList{}
	}
	if err := quotaOpts.Validate(); err != nil {
		return err
	}
	if err := remoteNSOpts.Validate(shadowPodOpts.AllowPrivileged); err != nil {
		return err
	}
	if shadowPodOpts.AllowPrivileged && remoteNSOpts.PodSecurity != remotenamespace.PodSecurityPrivileged {
		log.Info("--allow-privileged-shadowpods is set but remote namespaces enforce a stricter Pod Security level: the pods only the privileged level admits are refused by the API server (set --tenant-pod-security=privileged to run them)",
			"tenantPodSecurity", remoteNSOpts.PodSecurity)
	}
	if heartbeatInterval <= 0 || tenantGrace <= 2*heartbeatInterval {
		return fmt.Errorf("--tenant-grace-period (%s) must be more than twice --consumer-heartbeat-interval (%s)", tenantGrace, heartbeatInterval)
	}
	if renewFraction <= 0 || renewFraction >= 1 {
		return fmt.Errorf("--credentials-renew-fraction must be between 0 and 1, got %v", renewFraction)
	}

	cfg, err := opts.RESTConfig()
	if err != nil {
		return err
	}
	// Building the manager needs the API server (discovery); after a restart
	// caused by its outage it may still be away: wait for it.
	var mgr ctrl.Manager
	for attempt := 0; ; attempt++ {
		if mgr, err = agent.NewManager(cfg, opts, remotenamespace.CacheByObject()); err == nil {
			break
		}
		if attempt%15 == 0 {
			log.Error(err, "cannot create the manager yet (is the API server up?); retrying")
		}
		time.Sleep(2 * time.Second)
	}
	id, err := readIdentity(mgr.GetAPIReader(), log)
	if err != nil {
		return err
	}
	log.Info("starting annex-agent", "version", version.Version, "clusterID", id.ClusterID, "namespace", opts.Namespace)

	remotes := remote.NewManager(mgr.GetClient(), mgr.GetScheme(), remoteOpts, clock.RealClock{}, log.WithName("remote"))
	if err := mgr.Add(remotes); err != nil {
		return err
	}
	if kubeletOpts.Enabled() {
		cs, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return err
		}
		ks, err := kubeletserver.New(kubeletserver.Config{Options: kubeletOpts, NodeIP: vnOpts.NodeIP,
			Local: mgr.GetAPIReader(), Clientset: cs, Remotes: remotes, ConnectTimeout: remoteOpts.CallTimeout,
			Log: log.WithName("kubelet-endpoint")})
		if err != nil {
			return err
		}
		if err := mgr.Add(ks); err != nil {
			return err
		}
		vnOpts.KubeletPort = kubeletOpts.Port
	}
	endpointOpts.LocalCIDRs = shadowendpointslice.IdentityRanges(id)
	netView := netview.New(mgr.GetClient())
	netView.SetLocalRanges(id.Prefixes()...)
	remoteNSOpts.Reader = mgr.GetAPIReader()
	remoteNSOpts.ShareQuota = quotaOpts.Enabled()
	remoteNSOpts.PodCIDR, _ = netip.ParsePrefix(id.PodCIDR) // none: no NetworkPolicies
	vnOpts.PodIPTranslator = netView.PodIP
	sent := &heartbeat.Sent{}
	// One record of when each consumer's heartbeat was seen, on this
	// agent's clock, for tenantgc and fencing.
	heard := tenantgc.NewHeard(clock.RealClock{})
	// One bucket per consumer for the writes that follow its changes, its
	// pods' labels and its EndpointSlices together (--tenant-sync-rate).
	tenantSync := fairqueue.NewLimiter(syncOpts, clock.RealClock{})
	shadowPodOpts.Sync, endpointOpts.Sync = tenantSync, tenantSync
	setups := []interface{ SetupWithManager(ctrl.Manager) error }{
		&foreigncluster.Reconciler{Client: mgr.GetClient(), Remote: remotes},
		&credentials.Reconciler{Client: mgr.GetClient(), Remotes: remotes, Clock: clock.RealClock{},
			Recorder: mgr.GetEventRecorder("annex-credentials"), RenewFraction: renewFraction, Retry: 5 * time.Second},
		replicator.New(mgr.GetClient(), remotes, id.ClusterID, corev1alpha1.GroupVersion.WithKind("ResourceSlice"),
			replicator.Options{Recorder: mgr.GetEventRecorder("annex-replicator")}),
		replicator.New(mgr.GetClient(), remotes, id.ClusterID, offloadingv1alpha1.GroupVersion.WithKind("RemoteNamespace"),
			replicator.Options{Recorder: mgr.GetEventRecorder("annex-replicator")}),
		&namespaceoffloading.Reconciler{Client: mgr.GetClient(), LocalClusterID: id.ClusterID, HeartbeatInterval: heartbeatInterval},
		reflection.New(mgr.GetClient(), remotes, id.ClusterID, reflection.Options{Translator: netView}),
		remotenamespace.New(mgr.GetClient(), mgr.GetEventRecorder("annex-remotenamespace"), remoteNSOpts),
		shadowpod.New(mgr.GetClient(), mgr.GetEventRecorder("annex-shadowpod"), shadowPodOpts),
		shadowendpointslice.New(mgr.GetClient(), mgr.GetEventRecorder("annex-shadowendpointslice"), endpointOpts),
		virtualnode.NewReconciler(mgr, remotes, id.ClusterID, vnOpts),
		&heartbeat.Reconciler{Client: mgr.GetClient(), Remotes: remotes, LocalClusterID: id.ClusterID, Clock: clock.RealClock{}, Interval: heartbeatInterval, Sent: sent},
		&failover.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Remotes: remotes, Heartbeats: sent, Recorder: mgr.GetEventRecorder("annex-failover"), Clock: clock.RealClock{}},
		&fencing.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("annex-fencing"), Clock: clock.RealClock{}, Heard: heard},
		&tenantgc.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("annex-tenantgc"), Clock: clock.RealClock{}, GracePeriod: tenantGrace, Heard: heard},
		&tenantquota.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: quotaOpts, Clock: clock.RealClock{}},
		&linkgc.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("annex-linkgc")},
		resourceslice.New(mgr.GetClient(), mgr.GetEventRecorder("annex-resourceslice"), id.ClusterID, sliceOpts),
	}
	if ext, err := netip.ParsePrefix(id.ExternalCIDR); err == nil {
		tr, err := transit.New(mgr.GetClient(), ext)
		if err != nil {
			return err
		}
		setups = append(setups, tr)
	} else {
		log.Info("no external CIDR in the cluster identity: pods on other providers are left out of reflected EndpointSlices", "externalCIDR", id.ExternalCIDR)
	}
	if gatewayOpts.Enabled() {
		pod, err := netip.ParsePrefix(id.PodCIDR)
		if err != nil {
			return fmt.Errorf("a gateway needs the pod CIDR in the cluster identity: %w", err)
		}
		ext, _ := netip.ParsePrefix(id.ExternalCIDR) // none: no transit
		svc, _ := netip.ParsePrefix(id.ServiceCIDR)  // none: peers' CIDRs not checked against it
		setups = append(setups, gatewayconfig.New(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder("annex-gatewayconfig"), gatewayOpts,
			gatewayconfig.Cluster{PodCIDR: pod, ServiceCIDR: svc, ExternalCIDR: ext}, clock.RealClock{}))
	}
	for _, s := range setups {
		if err := s.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up %T: %w", s, err)
		}
	}
	err = mgr.Start(ctrl.SetupSignalHandler())
	if err != nil && strings.Contains(err.Error(), "leader election lost") {
		// Usually this cluster's own API server stopped answering. Start over
		// as a fresh process (same PID, nothing of the old one left running)
		// and campaign again, rather than exit and leave the cluster without
		// an agent until something restarts it. The environment keeps the
		// leader identity, so a Lease still in our name is taken back at once.
		log.Error(err, "lost leadership; restarting")
		time.Sleep(2 * time.Second)
		self, _ := os.Executable()
		return syscall.Exec(self, os.Args, os.Environ()) //nolint:gosec // G204: the agent re-executes its own binary with its own arguments
	}
	return err
}

// readIdentity reads the cluster identity. Annex not being installed is
// fatal after a short wait (the agent may start right after `annexctl
// install`); an API server that does not answer is waited for.
func readIdentity(c client.Reader, log logr.Logger) (identity.Identity, error) {
	notInstalledSince := time.Time{}
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		id, err := identity.Read(ctx, c)
		cancel()
		switch {
		case err == nil:
			return id, nil
		case errors.Is(err, identity.ErrNotInstalled):
			if notInstalledSince.IsZero() {
				notInstalledSince = time.Now()
			} else if time.Since(notInstalledSince) > 30*time.Second {
				return id, fmt.Errorf("read this cluster's identity: %w", err)
			}
		default:
			notInstalledSince = time.Time{}
			if attempt%30 == 0 {
				log.Error(err, "cannot read this cluster's identity yet; retrying")
			}
		}
		time.Sleep(time.Second)
	}
}
