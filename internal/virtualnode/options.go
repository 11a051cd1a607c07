package virtualnode

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spf13/pflag"

	"github.com/annexhq/annex/internal/virtualnode/podreflector"
)

// PodIPTranslator maps a pod IP in a provider's network into this cluster's
// view (func(providerID, ip string) string). The network package plugs its
// remappings in here; the default is the identity.
type PodIPTranslator = podreflector.PodIPTranslator

// Options tune the virtual nodes.
type Options struct {
	// NodeIP is the InternalIP of every virtual node and the hostIP of the
	// pods on it.
	NodeIP string
	// Workers is the number of workers of each of the reflector's queues,
	// per virtual node. Each worker waits on one API round trip at a time
	// (a ShadowPod creation or deletion on the provider, a pod status write
	// or deletion here), and an offloaded pod takes about one of each. With
	// 4 workers a burst of 1000 pods kept every worker of both queues
	// waiting (bench: round trips of 150-250 ms with both clusters on 2
	// busy CPUs); 16 keep up with the 55 pods/s the provider starts of its
	// own there, and cost nothing while idle. More (64 was tried) did not
	// help: the CPUs are the limit then. Nor under a steady stream of 20
	// pods/s (each deleted after it started, so a ShadowPod creation and
	// deletion and a local deletion per pod: about 0.6 s of a worker): with
	// 64 the wait moved on to the provider, both clusters' CPUs being busy.
	Workers int
	// LeaseDuration is the duration of the node leases (renewed every
	// quarter of it). The default, 40 s renewed every 10 s, is a
	// kubelet's: the node lifecycle controller marks a node whose Lease
	// is not renewed for its grace period (40 s) NotReady. The renewals
	// are the virtual node's liveness writes.
	LeaseDuration time.Duration
	// StatusUpdateInterval is how often a node's status is written when
	// nothing changes (changes are written at once): only the conditions'
	// lastHeartbeatTime changes then. The default, 5 minutes, is a
	// kubelet's nodeStatusReportFrequency: with node Leases the node
	// lifecycle controller does not need these writes.
	StatusUpdateInterval time.Duration
	// KubeAPIQPS and KubeAPIBurst rate-limit the virtual nodes' client of
	// the local API server (pod status, node, lease).
	KubeAPIQPS   float32
	KubeAPIBurst int
	// PodIPTranslator translates pod IPs; nil means the identity. Not a flag.
	PodIPTranslator PodIPTranslator
	// KubeletPort is the port of the kubelet endpoint that serves the
	// virtual nodes (logs, exec), advertised in each Node's
	// status.daemonEndpoints; 0 when none is served. Not a flag: the
	// kubeletserver package's --kubelet-port.
	KubeletPort int
}

// DefaultOptions returns the settings used when a flag is not given.
func DefaultOptions() Options {
	return Options{
		NodeIP:               "127.0.0.1",
		Workers:              16,
		LeaseDuration:        40 * time.Second,
		StatusUpdateInterval: 5 * time.Minute,
		KubeAPIQPS:           200,
		KubeAPIBurst:         400,
	}
}

// BindFlags registers the options on fs.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.NodeIP, "virtual-node-ip", o.NodeIP,
		"InternalIP of the virtual nodes (and hostIP of the pods they run)")
	fs.IntVar(&o.Workers, "virtual-node-workers", o.Workers,
		"workers per virtual node for pod reflection")
	fs.DurationVar(&o.LeaseDuration, "virtual-node-lease-duration", o.LeaseDuration,
		"duration of the virtual nodes' leases (renewed every quarter of it)")
	fs.DurationVar(&o.StatusUpdateInterval, "virtual-node-status-update-interval", o.StatusUpdateInterval,
		"how often a virtual node's status is written while nothing changes")
	fs.Float32Var(&o.KubeAPIQPS, "virtual-node-kube-api-qps", o.KubeAPIQPS,
		"queries per second of the virtual nodes' client of the local API server")
	fs.IntVar(&o.KubeAPIBurst, "virtual-node-kube-api-burst", o.KubeAPIBurst,
		"burst of the virtual nodes' client of the local API server")
}

// Validate reports every invalid option.
func (o *Options) Validate() error {
	var errs []error
	if net.ParseIP(o.NodeIP) == nil {
		errs = append(errs, fmt.Errorf("--virtual-node-ip must be an IP address, got %q", o.NodeIP))
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--virtual-node-workers must be at least 1, got %d", o.Workers))
	}
	if o.LeaseDuration < 4*time.Second || o.LeaseDuration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--virtual-node-lease-duration must be a whole number of seconds, at least 4s, got %s", o.LeaseDuration))
	}
	if o.StatusUpdateInterval <= 0 {
		errs = append(errs, fmt.Errorf("--virtual-node-status-update-interval must be positive, got %s", o.StatusUpdateInterval))
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--virtual-node-kube-api-qps and --virtual-node-kube-api-burst must be positive, got %v and %d", o.KubeAPIQPS, o.KubeAPIBurst))
	}
	return errors.Join(errs...)
}

// withDefaults replaces zero values with the defaults.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.NodeIP == "" {
		o.NodeIP = d.NodeIP
	}
	if o.Workers == 0 {
		o.Workers = d.Workers
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = d.LeaseDuration
	}
	if o.StatusUpdateInterval == 0 {
		o.StatusUpdateInterval = d.StatusUpdateInterval
	}
	if o.KubeAPIQPS == 0 {
		o.KubeAPIQPS = d.KubeAPIQPS
	}
	if o.KubeAPIBurst == 0 {
		o.KubeAPIBurst = d.KubeAPIBurst
	}
	if o.PodIPTranslator == nil {
		o.PodIPTranslator = podreflector.IdentityIPTranslator
	}
	return o
}
