package localcluster

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// The configuration files and command lines of real nodes. All of them are
// pure functions of the cluster's state, so that they can be checked
// without running anything.

// nodePodMTU is the MTU of pods on real nodes: Annex's gateways tunnel pod
// traffic over WireGuard devices of MTU 1420, like the sandbox's pod
// namespaces (internal/sandboxnet).
const nodePodMTU = 1420

// nodeKubeletPort is where kubelets serve their API, on the node's address
// inside its own network namespace.
const nodeKubeletPort = 10250

// disabledContainerdPlugins are containerd plugins a node has no use for
// (snapshotters for file systems it does not use, tracing).
var disabledContainerdPlugins = []string{
	"io.containerd.snapshotter.v1.aufs",
	"io.containerd.snapshotter.v1.btrfs",
	"io.containerd.snapshotter.v1.devmapper",
	"io.containerd.snapshotter.v1.zfs",
	"io.containerd.tracing.processor.v1.otlp",
	"io.containerd.internal.v1.tracing",
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	return strconv.Quote(s) // ASCII paths and names: Go's escapes are TOML's
}

// containerdConfig is a node's containerd configuration (version 2, for
// containerd 1.6): its root under the node's directory, its state and
// socket on the node's private /run, the CRI plugin with cgroupfs (the
// kubelet's driver), restrict_oom_score_adj (this VM lacks
// CAP_SYS_RESOURCE: runc cannot lower scores), the given sandbox image, its
// streaming server on the node's loopback, and the bridge CNI network.
func containerdConfig(n nodeLayout, pauseImage, cniBinDir string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	quoted := make([]string, len(disabledContainerdPlugins))
	for i, p := range disabledContainerdPlugins {
		quoted[i] = tomlString(p)
	}
	w("# Written by internal/localcluster for one real node.")
	w("version = 2")
	w("root = %s", tomlString(n.containerdRoot()))
	w("state = %s", tomlString("/run/containerd"))
	w("disabled_plugins = [%s]", strings.Join(quoted, ", "))
	w("")
	w("[grpc]")
	w("  address = %s", tomlString(nodeContainerdSocket))
	w("")
	w("[plugins]")
	w("  [plugins.\"io.containerd.internal.v1.opt\"]")
	w("    path = %s", tomlString(n.containerdOpt()))
	w("  [plugins.\"io.containerd.grpc.v1.cri\"]")
	w("    sandbox_image = %s", tomlString(pauseImage))
	w("    restrict_oom_score_adj = true")
	w("    stream_server_address = \"127.0.0.1\"")
	w("    stream_server_port = \"0\"")
	w("    enable_selinux = false")
	w("    [plugins.\"io.containerd.grpc.v1.cri\".containerd]")
	w("      snapshotter = \"overlayfs\"")
	w("      default_runtime_name = \"runc\"")
	w("      [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]")
	w("        runtime_type = \"io.containerd.runc.v2\"")
	w("        [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]")
	w("          SystemdCgroup = false")
	w("    [plugins.\"io.containerd.grpc.v1.cri\".cni]")
	w("      bin_dir = %s", tomlString(cniBinDir))
	w("      conf_dir = %s", tomlString(n.cniConfDir()))
	w("      max_conf_num = 1")
	return b.String()
}

// cniConfig is a node's CNI network: a bridge "cni0" that is the pods'
// default gateway, addresses from the node's pod CIDR (host-local), no
// masquerading by the plugin (the node masquerades what leaves the
// cluster's pod CIDR itself, masqueradeOutside), hairpin mode (a pod reaching itself through a
// Service), and portmap for hostPorts.
func cniConfig(podCIDR string) map[string]any {
	return map[string]any{
		"cniVersion": "1.0.0",
		"name":       "annex-localcluster",
		"plugins": []any{
			map[string]any{
				"type":             "bridge",
				"bridge":           podBridge,
				"isGateway":        true,
				"isDefaultGateway": true,
				"ipMasq":           false,
				"hairpinMode":      true,
				"mtu":              nodePodMTU,
				"ipam": map[string]any{
					"type":   "host-local",
					"ranges": []any{[]any{map[string]any{"subnet": podCIDR}}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}},
		},
	}
}

// kubeletConfig is a node's KubeletConfiguration.
func kubeletConfig(n realNode, nl nodeLayout, pki pkiFiles) map[string]any {
	zero := "0%"
	return map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		// Served on the node's address, in its own network namespace;
		// the API server verifies the certificate with the cluster CA.
		"address":            n.IP.String(),
		"port":               nodeKubeletPort,
		"readOnlyPort":       0,
		"healthzBindAddress": "127.0.0.1",
		"healthzPort":        10248,
		"tlsCertFile":        pki.cert(kubeletServingCertName(n.Name)),
		"tlsPrivateKeyFile":  pki.key(kubeletServingCertName(n.Name)),
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": pki.caCert()},
		},
		"authorization":            map[string]any{"mode": "Webhook"},
		"containerRuntimeEndpoint": nodeRuntimeEndpoint,
		// cgroup v1 hosts: a warning, not a refusal.
		"failCgroupV1": false,
		"cgroupDriver": "cgroupfs",
		"cgroupRoot":   n.CgroupRoot,
		// Never write host-wide sysctls (the node reads the expected
		// values from files bound over them).
		"protectKernelDefaults": true,
		// Imported images cannot be pulled again: never collect them.
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		// The host's disks and memory are shared with everything else on
		// the machine: never evict because of them.
		"evictionHard": map[string]string{
			"memory.available":  zero,
			"nodefs.available":  zero,
			"nodefs.inodesFree": zero,
			"imagefs.available": zero,
		},
		"failSwapOn": false,
		// No DNS leaves the node's namespaces.
		"resolvConf":          nl.resolvConf(),
		"clusterDomain":       "cluster.local",
		"podLogsDir":          nl.podLogs(),
		"registerNode":        true,
		"serializeImagePulls": false,
		"maxPods":             110,
	}
}

// kubeProxyConfig is a node's KubeProxyConfiguration: iptables mode in the
// node's network namespace, conntrack left alone (its settings are
// host-wide).
func kubeProxyConfig(n realNode, kubeconfig, podCIDR string) map[string]any {
	return map[string]any{
		"apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
		"kind":       "KubeProxyConfiguration",
		"clientConnection": map[string]any{
			"kubeconfig": kubeconfig,
		},
		"mode":               "iptables",
		"hostnameOverride":   n.Name,
		"bindAddress":        n.IP.String(),
		"clusterCIDR":        podCIDR,
		"healthzBindAddress": "127.0.0.1:10256",
		"metricsBindAddress": "127.0.0.1:10249",
		"oomScoreAdj":        0,
		"conntrack": map[string]any{
			"maxPerCore":            0,
			"min":                   0,
			"tcpEstablishedTimeout": "0s",
			"tcpCloseWaitTimeout":   "0s",
			"udpTimeout":            "0s",
			"udpStreamTimeout":      "0s",
		},
	}
}

// egressSelectorConfig sends the API server's connections to the cluster
// (kubelets, pods, Services' endpoints, webhooks) through the network
// process's HTTP CONNECT proxy on socket.
func egressSelectorConfig(socket string) map[string]any {
	return map[string]any{
		"apiVersion": "apiserver.k8s.io/v1beta1",
		"kind":       "EgressSelectorConfiguration",
		"egressSelections": []any{map[string]any{
			"name": "cluster",
			"connection": map[string]any{
				"proxyProtocol": "HTTPConnect",
				"transport":     map[string]any{"uds": map[string]any{"udsName": socket}},
			},
		}},
	}
}

// resolvConf is what pods and the node resolve names with: nothing, as no
// DNS may leave the node's namespaces.
const resolvConf = "# Written by internal/localcluster: no DNS leaves a real node.\nnameserver 127.0.0.1\n"

// marshalYAML renders a configuration document.
func marshalYAML(doc map[string]any) ([]byte, error) {
	data, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return append([]byte("# Written by internal/localcluster.\n"), data...), nil
}

// nsenterArgs runs argv inside node (whose init is pid): its mount,
// network and PID namespaces (nsenter forks into the PID namespace and
// waits for the program), with workDir as working directory.
func nsenterArgs(pid int, workDir string, argv ...string) []string {
	return append([]string{
		"--target=" + strconv.Itoa(pid), "--mount", "--net", "--pid", "--wd=" + workDir, "--",
	}, argv...)
}

func containerdArgs(nl nodeLayout) []string {
	return []string{"--config=" + nl.containerdConfig(), "--log-level=warn"}
}

// kubeletArgs keep the kubelet's default root directory, /var/lib/kubelet,
// on the node's private tmpfs: the sockets it makes there need short paths
// (108 bytes), which the cluster's directory may not leave room for.
func kubeletArgs(n realNode, nl nodeLayout, kubeconfig string) []string {
	return []string{
		"--config=" + nl.kubeletConfig(),
		"--kubeconfig=" + kubeconfig,
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.IP.String(),
		"--v=1",
	}
}

func kubeProxyArgs(nl nodeLayout) []string {
	return []string{"--config=" + nl.kubeProxyConfig(), "--v=1"}
}

// nodeInitArgs are the command line of a node's init: `localcluster-proxy
// node`, forwarding the API address to the API server's port on the host's
// loopback (the host's network namespace is descriptor 3).
func nodeInitArgs(nn nodeNetwork, nl nodeLayout, apiPort int) []string {
	args := []string{
		"node",
		"--host-netns-fd=3",
		"--api-listen=" + netip.AddrPortFrom(nn.API, uint16(apiPort)).String(),                           //nolint:gosec // G115: a port
		"--api-target=" + netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(apiPort)).String(), //nolint:gosec // G115: a port
		"--ready-file=" + nl.ready(),
	}
	for _, d := range nodeTmpfs {
		args = append(args, "--tmpfs="+d)
	}
	keys := make([]string, 0, len(kernelDefaults))
	for k := range kernelDefaults {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--sysctl-file="+k+"="+nl.sysctlFile(k))
	}
	return args
}

// networkArgs are the command line of the cluster's network process.
func networkArgs(l layout, s *state) []string {
	return []string{
		"network",
		"--egress-socket=" + l.egressSocket(),
		"--host-netns-fd=3",
		"--allow=" + s.NodeNetworkCIDR + "," + s.PodCIDR,
		"--ready-file=" + l.networkReady(),
	}
}
