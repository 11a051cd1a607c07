package network

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/identity"
	"github.com/annexhq/annex/internal/netview"
	annexnet "github.com/annexhq/annex/internal/network"
)

// Side is what the decision needs to know about one end of a link: its
// identity, the NetworkConfigurations it already has (for any peer) and
// its nodes' addresses (a peer's CIDRs must hold none of them).
type Side struct {
	Identity identity.Identity
	Configs  []networkingv1alpha1.NetworkConfiguration
	Nodes    []annexnet.NodeAddress
}

// Choice is how one cluster maps one CIDR of its peer.
type Choice struct {
	// Mapping is the peer's CIDR and, when remapped, the CIDR it maps to.
	Mapping annexnet.Mapping
	// Conflict says what the peer's CIDR overlapped ("alpha's pod CIDR
	// 10.200.0.0/16"); empty when it overlapped nothing.
	Conflict string
	// Kept is true when the decision is the one already recorded.
	Kept bool
}

// View is how cluster Self maps the CIDRs of cluster Peer.
type View struct {
	Self, Peer    identity.Identity
	Pod, External Choice
}

// Plan is the decision for one link: how each side maps the other.
type Plan struct {
	// A is how the first cluster maps the second, B the reverse.
	A, B View
}

// Remapped is the view as written in status.remappedRemote (on Self) and
// status.remappedLocal (on Peer).
func (v View) Remapped() networkingv1alpha1.RemappedCIDRs {
	var r networkingv1alpha1.RemappedCIDRs
	if v.Pod.Mapping.IsRemapped() {
		r.PodCIDR = v.Pod.Mapping.Remapped.String()
	}
	if v.External.Mapping.IsRemapped() {
		r.ExternalCIDR = v.External.Mapping.Remapped.String()
	}
	return r
}

// Object is the NetworkConfiguration that Self keeps for Peer, with its
// status: reverse is the Peer's view of Self.
func (v View) Object(reverse View) *networkingv1alpha1.NetworkConfiguration {
	peer := v.Peer.ClusterID
	remote, local := v.Remapped(), reverse.Remapped()
	nc := &networkingv1alpha1.NetworkConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: networkingv1alpha1.GroupVersion.String(), Kind: "NetworkConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: peer, Namespace: corev1alpha1.AgentNamespace, Labels: map[string]string{
			corev1alpha1.LabelRemoteClusterID: peer, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex},
			// Decide refused any claim that differs from an earlier
			// agreement, so this records the first one and then keeps it.
			Annotations: map[string]string{netview.AnnotationAgreedRemoteCIDRs: netview.AgreedAnnotation(networkingv1alpha1.ClusterCIDRs{
				PodCIDR: v.Pod.Mapping.Original.String(), ExternalCIDR: v.External.Mapping.Original.String()})}},
		Spec: networkingv1alpha1.NetworkConfigurationSpec{
			RemoteClusterID: peer,
			Local:           networkingv1alpha1.ClusterCIDRs{PodCIDR: reverse.Pod.Mapping.Original.String(), ExternalCIDR: reverse.External.Mapping.Original.String()},
			Remote:          networkingv1alpha1.ClusterCIDRs{PodCIDR: v.Pod.Mapping.Original.String(), ExternalCIDR: v.External.Mapping.Original.String()},
		},
		Status: networkingv1alpha1.NetworkConfigurationStatus{RemappedRemote: &remote, RemappedLocal: &local},
	}
	v.setConditions(&nc.Status.Conditions, 0)
	return nc
}

// setConditions sets Remapped and Ready: the CLI knows both remappings.
func (v View) setConditions(conds *[]metav1.Condition, generation int64) {
	reason := networkingv1alpha1.ReasonNoOverlap
	if v.Pod.Mapping.IsRemapped() || v.External.Mapping.IsRemapped() {
		reason = networkingv1alpha1.ReasonCIDRRemapped
	}
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: networkingv1alpha1.ConditionRemapped, Status: metav1.ConditionTrue, Reason: reason, ObservedGeneration: generation,
		Message: fmt.Sprintf("pod CIDR %s, external CIDR %s", describeMapping(v.Pod.Mapping), describeMapping(v.External.Mapping)),
	})
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: networkingv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: networkingv1alpha1.ReasonConnected, ObservedGeneration: generation,
		Message: "both sides' remappings are known",
	})
}

func describeMapping(m annexnet.Mapping) string {
	if !m.IsRemapped() {
		return m.Original.String() + " as it is"
	}
	return m.Original.String() + " → " + m.Remapped.String()
}

// Lines describe the view for a person, one line per CIDR.
func (v View) Lines() []string {
	line := func(what string, c Choice) string {
		self, peer := v.Self.ClusterID, v.Peer.ClusterID
		var b strings.Builder
		if c.Mapping.IsRemapped() {
			fmt.Fprintf(&b, "%s maps %s's %s CIDR %s to %s", self, peer, what, c.Mapping.Original, c.Mapping.Remapped)
		} else {
			fmt.Fprintf(&b, "%s uses %s's %s CIDR %s as it is", self, peer, what, c.Mapping.Original)
		}
		switch {
		case c.Kept:
			b.WriteString(" (unchanged)")
		case c.Conflict != "":
			fmt.Fprintf(&b, " (it overlaps %s)", c.Conflict)
		}
		return b.String()
	}
	return []string{line("pod", v.Pod), line("external", v.External)}
}

// Decide chooses, for both sides of the link between a and b, how each maps
// the other's pod and external CIDRs. It first refuses a peer's CIDR that
// is not inside a private range, overlaps the side's service CIDR or holds
// one of its nodes' addresses (annexnet.CheckPeerCIDR: the agent would not
// program it either). A side remaps a peer's CIDR when it
// overlaps one of its own pod, service or external CIDRs or a CIDR of another
// peer as that side already sees it (from its other NetworkConfigurations);
// remapped CIDRs are the lowest free blocks of the same size in pool. A
// mapping already recorded for the same peer CIDR is kept while it is still
// free of conflicts, so a rerun decides nothing new.
func Decide(a, b Side, pool netip.Prefix) (Plan, error) {
	va, err := decideSide(a, b.Identity, pool)
	if err != nil {
		return Plan{}, err
	}
	vb, err := decideSide(b, a.Identity, pool)
	if err != nil {
		return Plan{}, err
	}
	return Plan{A: va, B: vb}, nil
}

// labelled is a CIDR in use on one side, with what it is for messages.
type labelled struct {
	p    netip.Prefix
	what string
}

func overlapping(p netip.Prefix, sets ...[]labelled) (labelled, bool) {
	for _, set := range sets {
		for _, l := range set {
			if l.p.IsValid() && l.p.Overlaps(p) {
				return l, true
			}
		}
	}
	return labelled{}, false
}

func prefixes(sets ...[]labelled) []netip.Prefix {
	var out []netip.Prefix
	for _, set := range sets {
		for _, l := range set {
			out = append(out, l.p)
		}
	}
	return out
}

func parseIdentityCIDR(id identity.Identity, what, s string, optional bool) (netip.Prefix, error) {
	if s == "" && optional {
		return netip.Prefix{}, nil
	}
	if s == "" {
		return netip.Prefix{}, fmt.Errorf("cluster %s: its identity has no %s CIDR (reinstall it with `annexctl install --%s-cidr`)", id.ClusterID, what, what)
	}
	p, err := annexnet.ParseCIDR(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("cluster %s: %s CIDR in its identity: %w", id.ClusterID, what, err)
	}
	return p, nil
}

// recorded is the view of a remote CIDR recorded in an existing
// NetworkConfiguration: its original and remapped form ("" for none).
func recorded(original, remapped string) (netip.Prefix, netip.Prefix) {
	o, _ := netip.ParsePrefix(original)
	r, _ := netip.ParsePrefix(remapped)
	return o.Masked(), r.Masked()
}

func decideSide(self Side, peer identity.Identity, pool netip.Prefix) (View, error) {
	me := self.Identity
	v := View{Self: me, Peer: peer}
	var local []labelled
	for _, f := range []struct {
		what, cidr string
		optional   bool
	}{{"pod", me.PodCIDR, false}, {"service", me.ServiceCIDR, true}, {"external", me.ExternalCIDR, false}} {
		p, err := parseIdentityCIDR(me, f.what, f.cidr, f.optional)
		if err != nil {
			return View{}, err
		}
		local = append(local, labelled{p, fmt.Sprintf("%s's %s CIDR %s", me.ClusterID, f.what, p)})
	}
	peerPod, err := parseIdentityCIDR(peer, "pod", peer.PodCIDR, false)
	if err != nil {
		return View{}, err
	}
	peerExt, err := parseIdentityCIDR(peer, "external", peer.ExternalCIDR, false)
	if err != nil {
		return View{}, err
	}
	ranges := annexnet.LocalRanges{ServiceCIDR: local[1].p /* service */, Nodes: self.Nodes}
	for _, c := range []struct {
		what string
		p    netip.Prefix
	}{{"pod", peerPod}, {"external", peerExt}} {
		if err := annexnet.CheckPeerCIDR(fmt.Sprintf("%s's %s CIDR", peer.ClusterID, c.what), c.p, ranges); err != nil {
			return View{}, fmt.Errorf("%s refuses the link: %w (as %s's identity ConfigMap %s/%s publishes it)",
				me.ClusterID, err, peer.ClusterID, corev1alpha1.AgentNamespace, corev1alpha1.ClusterIdentityConfigMapName)
		}
	}
	// A remapped CIDR must not take a node's address either.
	for _, n := range self.Nodes {
		local = append(local, labelled{netip.PrefixFrom(n.Addr, n.Addr.BitLen()), fmt.Sprintf("%s's node %s (%s)", me.ClusterID, n.Node, n.Addr)})
	}

	// Other peers' CIDRs as this side sees them, and what it recorded for this peer.
	var inUse []labelled
	var existing *networkingv1alpha1.NetworkConfiguration
	for i := range self.Configs {
		nc := &self.Configs[i]
		if nc.Name == peer.ClusterID || nc.Spec.RemoteClusterID == peer.ClusterID {
			if nc.Name == peer.ClusterID {
				existing = nc
			}
			continue
		}
		other := nc.Spec.RemoteClusterID
		var rr networkingv1alpha1.RemappedCIDRs
		if nc.Status.RemappedRemote != nil {
			rr = *nc.Status.RemappedRemote
		}
		for _, f := range []struct{ what, orig, remapped string }{
			{"pod", nc.Spec.Remote.PodCIDR, rr.PodCIDR},
			{"external", nc.Spec.Remote.ExternalCIDR, rr.ExternalCIDR},
		} {
			o, r := recorded(f.orig, f.remapped)
			if r.IsValid() {
				inUse = append(inUse, labelled{r, fmt.Sprintf("%s's %s CIDR as %s maps it (%s)", other, f.what, me.ClusterID, r)})
			} else if o.IsValid() {
				inUse = append(inUse, labelled{o, fmt.Sprintf("%s's %s CIDR %s", other, f.what, o)})
			}
		}
	}
	if existing != nil {
		if err := checkAgreed(me.ClusterID, peer.ClusterID, existing, peerPod, peerExt); err != nil {
			return View{}, err
		}
	}
	// prev returns the recorded decision for a peer CIDR: nil when there is
	// none (or it was for a different CIDR), the zero Prefix for "as is".
	prev := func(orig netip.Prefix, recordedOrig string, pick func(networkingv1alpha1.RemappedCIDRs) string) *netip.Prefix {
		if existing == nil || existing.Status.RemappedRemote == nil {
			return nil
		}
		if o, _ := recorded(recordedOrig, ""); o != orig {
			return nil
		}
		_, r := recorded("", pick(*existing.Status.RemappedRemote))
		return &r
	}

	var pp, pe *netip.Prefix
	if existing != nil {
		pp = prev(peerPod, existing.Spec.Remote.PodCIDR, func(r networkingv1alpha1.RemappedCIDRs) string { return r.PodCIDR })
		pe = prev(peerExt, existing.Spec.Remote.ExternalCIDR, func(r networkingv1alpha1.RemappedCIDRs) string { return r.ExternalCIDR })
	}
	// The pod CIDR first; its remapping must not take the peer's external
	// CIDR, which the second decision may use as it is.
	avoid := []labelled{{peerExt, fmt.Sprintf("%s's external CIDR %s", peer.ClusterID, peerExt)}}
	if v.Pod, err = choose(me.ClusterID, peer.ClusterID, "pod", peerPod, pp, local, inUse, avoid, pool); err != nil {
		return View{}, err
	}
	podView := []labelled{{v.Pod.Mapping.View(), fmt.Sprintf("%s's pod CIDR as %s maps it (%s)", peer.ClusterID, me.ClusterID, v.Pod.Mapping.View())}}
	if v.External, err = choose(me.ClusterID, peer.ClusterID, "external", peerExt, pe, local, append(inUse, podView...), nil, pool); err != nil {
		return View{}, err
	}
	return v, nil
}

// Agreed returns the peer's CIDRs a link agreed on: those recorded in
// annotation netview.AnnotationAgreedRemoteCIDRs when the link was first
// made, or, for a link recorded before agreements were, its spec.remote.
func Agreed(nc *networkingv1alpha1.NetworkConfiguration) (networkingv1alpha1.ClusterCIDRs, error) {
	agreed, ok, err := netview.AgreedRemote(nc)
	if err != nil {
		return agreed, err
	}
	if !ok {
		return nc.Spec.Remote, nil
	}
	return agreed, nil
}

// checkAgreed refuses peer's current claims (its identity's pod and
// external CIDRs) when they are not the ones self's link with it agreed on
// (network.RuleAgreedRange): a peer cannot move or widen its ranges under
// an existing link; disconnecting and connecting again agrees anew.
func checkAgreed(self, peer string, existing *networkingv1alpha1.NetworkConfiguration, pod, ext netip.Prefix) error {
	agreed, err := Agreed(existing)
	if err != nil {
		return fmt.Errorf("%s refuses the link: NetworkConfiguration %s/%s: %w (run `annexctl network disconnect` and connect again)", self, existing.Namespace, existing.Name, err)
	}
	for _, c := range []struct {
		what, agreed string
		p            netip.Prefix
	}{{"pod", agreed.PodCIDR, pod}, {"external", agreed.ExternalCIDR, ext}} {
		a, _ := netip.ParsePrefix(c.agreed)
		if c.agreed != "" && !a.IsValid() {
			a = netip.PrefixFrom(netip.IPv4Unspecified(), 0) // unreadable: agrees with nothing valid
		}
		if err := annexnet.CheckAgreed(fmt.Sprintf("%s's %s CIDR", peer, c.what), c.p, a); err != nil {
			return fmt.Errorf("%s refuses the link: %w (as %s's identity ConfigMap %s/%s publishes it; %s's NetworkConfiguration %s/%s recorded the agreement)",
				self, err, peer, corev1alpha1.AgentNamespace, corev1alpha1.ClusterIdentityConfigMapName, self, existing.Namespace, existing.Name)
		}
	}
	return nil
}

// choose decides how self maps one CIDR orig of peer.
func choose(self, peer, what string, orig netip.Prefix, prev *netip.Prefix, local, inUse, avoid []labelled, pool netip.Prefix) (Choice, error) {
	conflict, hit := overlapping(orig, local, inUse)
	if prev != nil {
		switch {
		case !prev.IsValid() && !hit:
			return Choice{Mapping: annexnet.Mapping{Original: orig}, Kept: true}, nil
		case prev.IsValid() && prev.Bits() == orig.Bits() && prev.Addr().Is4() == orig.Addr().Is4():
			if _, bad := overlapping(*prev, local, inUse, avoid); !bad {
				c := Choice{Mapping: annexnet.Mapping{Original: orig, Remapped: *prev}, Kept: true}
				if hit {
					c.Conflict = conflict.what
				}
				return c, nil
			}
		}
	}
	if !hit {
		return Choice{Mapping: annexnet.Mapping{Original: orig}}, nil
	}
	r, err := annexnet.AllocateCIDR(pool, orig.Bits(), prefixes(local, inUse, avoid))
	if err != nil {
		if errors.Is(err, annexnet.ErrNoFreeCIDR) {
			return Choice{}, fmt.Errorf("%s cannot map %s's %s CIDR %s, which overlaps %s: %w (choose a larger pool with --remap-pool)", self, peer, what, orig, conflict.what, err)
		}
		return Choice{}, err
	}
	return Choice{Mapping: annexnet.Mapping{Original: orig, Remapped: r}, Conflict: conflict.what}, nil
}
