// Package localclusterproxy is the localcluster-proxy command of the kube
// multi-call binary: the two small processes internal/localcluster runs for
// a cluster with real nodes, which need to outlive the process that started
// the cluster (annexctl sandbox detaches its clusters).
//
//   - `localcluster-proxy network` owns a cluster's node network: it is
//     started in a network namespace of its own (the namespace lives as long
//     as the process) that holds the bridge joining the cluster's nodes, and
//     it serves the API server's egress: an HTTP CONNECT proxy on a Unix
//     socket (kube-apiserver --egress-selector-config-file, selection
//     "cluster") that dials the kubelets, pods and kwok inside the namespaces
//     the cluster owns, and nothing else.
//   - `localcluster-proxy node` is the first process (PID 1) of a real node's
//     PID, mount and network namespaces: it prepares the node's private mounts
//     (a fresh /proc, tmpfs over the directories whose paths are hard-coded
//     in containerd and the kubelet, read-only host sysctls), forwards the
//     node's API address to the API server on the host's loopback, and reaps
//     orphans. When it exits, the kernel kills every process of the node
//     (containerd, its shims, the containers, kubelet, kube-proxy), and its
//     namespaces, mounts and devices go with them.
//
// Both reach the host's network namespace through a descriptor of it they
// inherit (--host-netns-fd), entered per OS thread: nothing of theirs
// listens outside 127.0.0.1 or the namespaces the cluster owns. Linux only;
// root.
package localclusterproxy

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
)

// Name is the command's name: the symlink of the kube binary that runs it.
const Name = "localcluster-proxy"

// Main runs the command with args (args[0] is the command's name) and
// returns the process's exit code.
func Main(args []string) int {
	return run(args, os.Stderr)
}

func run(args []string, stderr io.Writer) int {
	if len(args) < 2 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	var err error
	switch args[1] {
	case "network":
		err = runNetwork(args[2:], stderr, log)
	case "node":
		err = runNode(args[2:], stderr, log)
	case "-h", "--help", "help":
		fmt.Fprint(stderr, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "%s: unknown mode %q\n\n%s", Name, args[1], usage)
		return 2
	}
	if err == flag.ErrHelp {
		return 0
	}
	if err != nil {
		log.Error("Exiting", "err", err)
		return 1
	}
	return 0
}

const usage = `Usage: localcluster-proxy network|node [flags]

The helper processes of internal/localcluster's real nodes; localcluster
starts them, they are not meant to be run by hand.

  network  the cluster's node network: started in a network namespace of its
           own, it serves the API server's egress (HTTP CONNECT on a Unix
           socket) into the namespaces the cluster owns.
  node     PID 1 of a real node's PID, mount and network namespaces: private
           mounts, the node's API address, reaping.

Run "localcluster-proxy network --help" or "... node --help" for their flags.
`
