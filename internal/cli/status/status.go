// Package status owns `annexctl status` (alias info): one row per peer of the
// cluster — role, reachability and probe latency, resources granted and in
// use, virtual node readiness and network link —, one row per network
// link with its tunnel's state, last handshake and bytes, and, where the
// fabric runs (annex-fabric DaemonSet), how many nodes are programmed and
// one row per node that is not, with why.
package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/identity"
)

// Peer is one row of the status.
type Peer struct {
	ClusterID    string            `json:"clusterID"`
	Role         string            `json:"role"`
	Reachable    string            `json:"reachable"`
	Reason       string            `json:"reason,omitempty"`
	Message      string            `json:"message,omitempty"`
	ProbeLatency string            `json:"probeLatency,omitempty"`
	Unreachable  bool              `json:"markedUnreachable,omitempty"`
	Granted      map[string]string `json:"granted,omitempty"`
	InUse        map[string]string `json:"inUse,omitempty"`
	VirtualNode  string            `json:"virtualNode,omitempty"`
	NodeReady    string            `json:"nodeReady,omitempty"`
	Network      string            `json:"network"`
}

// Link is one network link (NetworkConfiguration) and its tunnel.
type Link struct {
	Remote string `json:"remote"`
	// Tunnel is the TunnelConnected condition: True, or the reason it is
	// not (NoTunnel, GatewayDown, TunnelDown), "Unknown" before any report.
	Tunnel        string `json:"tunnel"`
	Endpoint      string `json:"endpoint,omitempty"`
	LastHandshake string `json:"lastHandshake,omitempty"`
	RxBytes       int64  `json:"rxBytes,omitempty"`
	TxBytes       int64  `json:"txBytes,omitempty"`
}

// Fabric is the state of the node agents (nil when none runs).
type Fabric struct {
	Gateway    string `json:"gatewayNode,omitempty"`
	Nodes      int    `json:"nodes"`
	Programmed int    `json:"programmed"`
	// NotProgrammed are the nodes that are not, with why.
	NotProgrammed []FabricProblem `json:"notProgrammed,omitempty"`
}

// FabricProblem is a node whose fabric is not programmed.
type FabricProblem struct {
	Node    string `json:"node"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// Report is the whole status.
type Report struct {
	ClusterID string  `json:"clusterID"`
	Peers     []Peer  `json:"peers"`
	Links     []Link  `json:"networkLinks"`
	Fabric    *Fabric `json:"fabric,omitempty"`
}

// Collect reads the status of every peer of the cluster.
func Collect(ctx context.Context, c *cli.Cluster) (*Report, error) {
	id, err := identity.Read(ctx, c.Client)
	if err != nil {
		return nil, err
	}
	r := &Report{ClusterID: id.ClusterID, Peers: []Peer{}}
	fcs := &corev1alpha1.ForeignClusterList{}
	if err := c.Client.List(ctx, fcs); err != nil {
		return nil, c.Unreachable(err)
	}
	sort.Slice(fcs.Items, func(i, j int) bool { return fcs.Items[i].Name < fcs.Items[j].Name })
	for _, fc := range fcs.Items {
		p := Peer{ClusterID: fc.Spec.ClusterID, Role: string(fc.Status.Role), Reachable: "Unknown", Network: "none", Unreachable: fc.Spec.Unreachable}
		if cond := meta.FindStatusCondition(fc.Status.Conditions, corev1alpha1.ConditionAPIServerReachable); cond != nil {
			p.Reachable, p.Reason, p.Message = string(cond.Status), cond.Reason, cond.Message
		}
		if fc.Status.ProbeLatency != nil {
			p.ProbeLatency = fc.Status.ProbeLatency.Duration.String()
		}
		p.Network, err = networkLink(ctx, c.Client, fc.Spec.ClusterID)
		if err != nil {
			return nil, err
		}
		vn := &corev1alpha1.VirtualNode{}
		err := c.Client.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.PeerNamespaceName(fc.Spec.ClusterID), Name: fc.Spec.ClusterID}, vn)
		switch {
		case err == nil:
			p.Granted = quantities(vn.Spec.Resources)
			p.VirtualNode = vn.NodeName()
			p.NodeReady, p.InUse, err = nodeUsage(ctx, c.Client, vn.NodeName())
			if err != nil {
				return nil, err
			}
		case !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err):
			return nil, err
		}
		r.Peers = append(r.Peers, p)
	}
	if r.Links, err = links(ctx, c.Client, time.Now()); err != nil {
		return nil, err
	}
	if r.Fabric, err = fabric(ctx, c.Client); err != nil {
		return nil, err
	}
	return r, nil
}

// fabric reports the FabricNodes of the nodes annex-fabric runs on (the
// DaemonSet's desired pods: neither virtual nor simulated nodes), nil
// without the DaemonSet.
func fabric(ctx context.Context, c client.Client) (*Fabric, error) {
	ds := &appsv1.DaemonSet{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: "annex-fabric"}, ds); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		return nil, err
	}
	fns := &networkingv1alpha1.FabricNodeList{}
	if err := c.List(ctx, fns, client.InNamespace(corev1alpha1.AgentNamespace)); err != nil && !meta.IsNoMatchError(err) {
		return nil, err
	}
	byNode := map[string]*networkingv1alpha1.FabricNode{}
	for i := range fns.Items {
		byNode[fns.Items[i].Name] = &fns.Items[i]
	}
	f := &Fabric{}
	for _, n := range nodes.Items {
		if t := n.Labels["type"]; t == "virtual-node" || t == "kwok" {
			continue
		}
		f.Nodes++
		fn := byNode[n.Name]
		if fn == nil {
			f.NotProgrammed = append(f.NotProgrammed, FabricProblem{Node: n.Name, Reason: "NoReport",
				Message: "no FabricNode: annex-fabric has not run on this node (kubectl -n annex-system get pods -l app.kubernetes.io/name=annex-fabric -o wide)"})
			continue
		}
		if fn.Status.GatewayNode != "" {
			f.Gateway = fn.Status.GatewayNode
		}
		cond := meta.FindStatusCondition(fn.Status.Conditions, networkingv1alpha1.ConditionProgrammed)
		switch {
		case cond == nil:
			f.NotProgrammed = append(f.NotProgrammed, FabricProblem{Node: n.Name, Reason: "Unknown", Message: "no report yet"})
		case cond.Status != metav1.ConditionTrue:
			f.NotProgrammed = append(f.NotProgrammed, FabricProblem{Node: n.Name, Reason: cond.Reason, Message: cond.Message})
		default:
			f.Programmed++
		}
	}
	return f, nil
}

// links lists the network links with their tunnels' state.
func links(ctx context.Context, c client.Client, now time.Time) ([]Link, error) {
	ncs := &networkingv1alpha1.NetworkConfigurationList{}
	err := c.List(ctx, ncs, client.InNamespace(corev1alpha1.AgentNamespace))
	if meta.IsNoMatchError(err) {
		return []Link{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := []Link{}
	for _, nc := range ncs.Items {
		l := Link{Remote: nc.Spec.RemoteClusterID, Tunnel: "Unknown"}
		if cond := meta.FindStatusCondition(nc.Status.Conditions, networkingv1alpha1.ConditionTunnelConnected); cond != nil {
			l.Tunnel = string(cond.Status)
			if cond.Status != metav1.ConditionTrue {
				l.Tunnel = cond.Reason
			}
		}
		if nc.Spec.Tunnel != nil {
			l.Endpoint = nc.Spec.Tunnel.RemoteEndpoint
		}
		if t := nc.Status.Tunnel; t != nil {
			l.RxBytes, l.TxBytes = t.RxBytes, t.TxBytes
			if t.LastHandshake != nil {
				l.LastHandshake = now.Sub(t.LastHandshake.Time).Round(time.Second).String() + " ago"
			}
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Remote < out[j].Remote })
	return out, nil
}

// networkLink describes the NetworkConfiguration with the peer: "none", or
// "linked" followed by the remappings this cluster uses for the peer.
func networkLink(ctx context.Context, c client.Client, peer string) (string, error) {
	nc := &networkingv1alpha1.NetworkConfiguration{}
	err := c.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: peer}, nc)
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return "none", nil
	}
	if err != nil {
		return "", err
	}
	out := "linked"
	if r := nc.Status.RemappedRemote; r != nil {
		if r.PodCIDR != "" {
			out += fmt.Sprintf(", pods %s as %s", nc.Spec.Remote.PodCIDR, r.PodCIDR)
		}
		if r.ExternalCIDR != "" {
			out += fmt.Sprintf(", external %s as %s", nc.Spec.Remote.ExternalCIDR, r.ExternalCIDR)
		}
	}
	return out, nil
}

// nodeUsage returns the Node's Ready status and the requests of the pods on it.
func nodeUsage(ctx context.Context, c client.Client, name string) (string, map[string]string, error) {
	node := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return "NoNode", nil, nil
		}
		return "", nil, err
	}
	ready := "Unknown"
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			ready = string(cond.Status)
		}
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.MatchingFields{"spec.nodeName": name}); err != nil {
		return ready, nil, err
	}
	used := corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(0, resource.DecimalSI)}
	for _, pod := range pods.Items {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		n := used[corev1.ResourcePods]
		n.Add(resource.MustParse("1"))
		used[corev1.ResourcePods] = n
		for _, ctr := range pod.Spec.Containers {
			for rn, q := range ctr.Resources.Requests {
				sum := used[rn]
				sum.Add(q)
				used[rn] = sum
			}
		}
	}
	return ready, quantities(used), nil
}

func quantities(rl corev1.ResourceList) map[string]string {
	out := map[string]string{}
	for n, q := range rl {
		out[string(n)] = q.String()
	}
	return out
}

// Print writes the report as a table, JSON or YAML.
func Print(w io.Writer, r *Report, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "yaml":
		data, err := yaml.Marshal(r)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	case "", "table":
	default:
		return fmt.Errorf("unknown output format %q (use table, json or yaml)", format)
	}
	fmt.Fprintf(w, "Cluster %s\n", r.ClusterID)
	if len(r.Peers) == 0 {
		fmt.Fprintln(w, "No peers. Peer with a provider: annexctl peer --kubeconfig C --remote-kubeconfig P")
	} else if err := printPeers(w, r.Peers); err != nil {
		return err
	}
	if len(r.Links) > 0 {
		fmt.Fprintln(w, "\nNetwork links")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "REMOTE\tTUNNEL\tREMOTE GATEWAY\tLAST HANDSHAKE\tRECEIVED\tSENT")
		for _, l := range r.Links {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d B\t%d B\n", l.Remote, l.Tunnel, dash(l.Endpoint), dash(l.LastHandshake), l.RxBytes, l.TxBytes)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if f := r.Fabric; f != nil {
		fmt.Fprintf(w, "\nFabric: %d of %d nodes programmed, gateway on %s\n", f.Programmed, f.Nodes, dash(f.Gateway))
		if len(f.NotProgrammed) > 0 {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE NOT PROGRAMMED\tREASON\tMESSAGE")
			for _, p := range f.NotProgrammed {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Node, p.Reason, dash(p.Message))
			}
			return tw.Flush()
		}
	}
	return nil
}

func printPeers(w io.Writer, peers []Peer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tROLE\tREACHABLE\tLATENCY\tGRANTED\tIN USE\tVIRTUAL NODE\tNETWORK")
	for _, p := range peers {
		reach := p.Reachable
		if p.Unreachable {
			reach = "MarkedUnreachable"
		} else if p.Reachable != "True" && p.Reason != "" {
			reach += " (" + p.Reason + ")"
		}
		node := "-"
		if p.VirtualNode != "" {
			node = p.VirtualNode + " Ready=" + p.NodeReady
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ClusterID, p.Role, reach, dash(p.ProbeLatency), short(p.Granted), short(p.InUse), node, p.Network)
	}
	return tw.Flush()
}

func short(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range []string{"cpu", "memory", "pods"} {
		if v, ok := m[k]; ok {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, ",")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
