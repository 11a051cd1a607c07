// Package offload owns `annexctl offload namespace` and `annexctl unoffload
// namespace`: it writes the namespace's NamespaceOffloading, waits for the
// agent to get a remote namespace from every selected provider (or removes
// them) and shows the result.
package offload

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/cli"
)

// Options are the settings of one offload.
type Options struct {
	// ClusterSelector is a label selector over virtual node labels, e.g.
	// "region=eu,annex.dev/remote-cluster-id in (beta,gamma)".
	ClusterSelector string
	PodStrategy     string
	Mapping         string
	// ReleaseAfter, when not zero, turns failover on (spec.failover) with
	// FenceAfter.
	ReleaseAfter time.Duration
	FenceAfter   time.Duration
	Wait         bool
	Timeout      time.Duration
}

// DefaultOptions are the CLI defaults.
func DefaultOptions() Options {
	return Options{PodStrategy: string(offloadingv1alpha1.PodOffloadingLocalAndRemote), Mapping: string(offloadingv1alpha1.NamespaceMappingDefaultName), FenceAfter: 30 * time.Second, Wait: true, Timeout: 2 * time.Minute}
}

// Spec turns the options into a NamespaceOffloading spec, with one clear
// error for bad input.
func (o Options) Spec() (offloadingv1alpha1.NamespaceOffloadingSpec, error) {
	spec := offloadingv1alpha1.NamespaceOffloadingSpec{
		PodOffloadingStrategy:    offloadingv1alpha1.PodOffloadingStrategy(o.PodStrategy),
		NamespaceMappingStrategy: offloadingv1alpha1.NamespaceMappingStrategy(o.Mapping),
	}
	switch spec.PodOffloadingStrategy {
	case offloadingv1alpha1.PodOffloadingLocal, offloadingv1alpha1.PodOffloadingRemote, offloadingv1alpha1.PodOffloadingLocalAndRemote:
	default:
		return spec, fmt.Errorf("--pod-strategy %q: use Local, Remote or LocalAndRemote", o.PodStrategy)
	}
	switch spec.NamespaceMappingStrategy {
	case offloadingv1alpha1.NamespaceMappingDefaultName, offloadingv1alpha1.NamespaceMappingEnforceSameName:
	default:
		return spec, fmt.Errorf("--mapping %q: use DefaultName or EnforceSameName", o.Mapping)
	}
	if o.ReleaseAfter != 0 {
		fence, release := o.FenceAfter.Seconds(), o.ReleaseAfter.Seconds()
		margin := float64(offloadingv1alpha1.FencingMarginSeconds)
		switch {
		case fence < 10 || fence > 86400 || fence != float64(int32(fence)):
			return spec, fmt.Errorf("--failover-fence-after %s: use whole seconds from 10s to 24h", o.FenceAfter)
		case release < fence+margin || release != float64(int32(release)):
			return spec, fmt.Errorf("--failover-release-after %s: use whole seconds, at least --failover-fence-after (%s) + %ds", o.ReleaseAfter, o.FenceAfter, offloadingv1alpha1.FencingMarginSeconds)
		}
		spec.Failover = &offloadingv1alpha1.Failover{FenceAfterSeconds: int32(fence), ReleaseAfterSeconds: int32(release)}
	}
	if o.ClusterSelector != "" {
		sel, err := labels.Parse(o.ClusterSelector)
		if err != nil {
			return spec, fmt.Errorf("--cluster-selector: %w", err)
		}
		reqs, _ := sel.Requirements()
		term := corev1.NodeSelectorTerm{}
		ops := map[selection.Operator]corev1.NodeSelectorOperator{
			selection.Equals: corev1.NodeSelectorOpIn, selection.DoubleEquals: corev1.NodeSelectorOpIn, selection.In: corev1.NodeSelectorOpIn,
			selection.NotEquals: corev1.NodeSelectorOpNotIn, selection.NotIn: corev1.NodeSelectorOpNotIn,
			selection.Exists: corev1.NodeSelectorOpExists, selection.DoesNotExist: corev1.NodeSelectorOpDoesNotExist,
			selection.GreaterThan: corev1.NodeSelectorOpGt, selection.LessThan: corev1.NodeSelectorOpLt,
		}
		for _, r := range reqs {
			term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{Key: r.Key(), Operator: ops[r.Operator()], Values: r.ValuesUnsorted()})
		}
		spec.ClusterSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}}
	}
	return spec, nil
}

// Run offloads namespace ns.
func Run(ctx context.Context, s cli.IOStreams, c *cli.Cluster, ns string, o Options) error {
	spec, err := o.Spec()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := c.Client.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace %q does not exist", ns)
		}
		return c.Unreachable(err)
	}
	nso := &offloadingv1alpha1.NamespaceOffloading{
		TypeMeta:   metav1.TypeMeta{APIVersion: offloadingv1alpha1.GroupVersion.String(), Kind: "NamespaceOffloading"},
		ObjectMeta: metav1.ObjectMeta{Name: offloadingv1alpha1.NamespaceOffloadingName, Namespace: ns},
		Spec:       spec,
	}
	changed, err := cli.ApplyTyped(ctx, c.Client, nso)
	if err != nil {
		return err
	}
	if changed {
		s.Step("NamespaceOffloading %s/offloading: pods %s, namespaces %s", ns, spec.PodOffloadingStrategy, spec.NamespaceMappingStrategy)
	} else {
		s.Step("NamespaceOffloading %s/offloading unchanged", ns)
	}
	if !o.Wait {
		return nil
	}
	s.Step("waiting for the providers' remote namespaces...")
	err = cli.Poll(ctx, 250*time.Millisecond, o.Timeout, "namespace "+ns+" to be offloaded (is the agent running?)", func(ctx context.Context) (bool, error) {
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(nso), nso); err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(nso.Status.Conditions, offloadingv1alpha1.ConditionReady)
		if cond == nil || cond.ObservedGeneration != nso.Generation {
			return false, nil
		}
		switch cond.Reason {
		case offloadingv1alpha1.ReasonReconciled, offloadingv1alpha1.ReasonNoClusterSelected, offloadingv1alpha1.ReasonRemoteNamespaceFailed:
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	for _, rn := range nso.Status.RemoteNamespaces {
		line := fmt.Sprintf("provider %s: namespace %s %s", rn.ClusterID, rn.RemoteNamespace, rn.Phase)
		if rn.Message != "" {
			line += " (" + rn.Message + ")"
		}
		s.Step("%s", line)
	}
	if f := meta.FindStatusCondition(nso.Status.Conditions, offloadingv1alpha1.ConditionFailover); f != nil {
		s.Step("failover %s: %s", f.Reason, f.Message)
	}
	cond := meta.FindStatusCondition(nso.Status.Conditions, offloadingv1alpha1.ConditionReady)
	if cond.Status != metav1.ConditionTrue {
		return fmt.Errorf("namespace %s is not offloaded: %s", ns, cond.Message)
	}
	fmt.Fprintf(s.Out, "Namespace %s is offloaded (%s).\n", ns, cond.Message)
	return nil
}

// Remove unoffloads namespace ns: its remote namespaces, and everything the
// providers run there, are deleted.
func Remove(ctx context.Context, s cli.IOStreams, c *cli.Cluster, ns string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nso := &offloadingv1alpha1.NamespaceOffloading{}
	nso.Name, nso.Namespace = offloadingv1alpha1.NamespaceOffloadingName, ns
	if err := c.Client.Delete(ctx, nso); err != nil {
		if apierrors.IsNotFound(err) {
			fmt.Fprintf(s.Out, "Namespace %s is not offloaded; nothing to do.\n", ns)
			return nil
		}
		return err
	}
	s.Step("deleting the remote namespaces of %s...", ns)
	err := cli.Poll(ctx, 250*time.Millisecond, timeout, "the remote namespaces of "+ns+" to be removed", func(ctx context.Context) (bool, error) {
		err := c.Client.Get(ctx, client.ObjectKeyFromObject(nso), nso)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "Namespace %s is no longer offloaded.\n", ns)
	return nil
}
