// Package uninstall owns `annexctl uninstall`: it removes what `annexctl
// install` applied (what the embedded chart renders) and waits until it is
// gone.
package uninstall

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/chart"
	"github.com/annexhq/annex/internal/cli"
)

// Options are the settings of one uninstall.
type Options struct {
	// Force uninstalls even while peerings exist.
	Force   bool
	Timeout time.Duration
}

// Run removes Annex from the cluster.
func Run(ctx context.Context, s cli.IOStreams, c *cli.Cluster, o Options) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if !o.Force {
		fcs := &corev1alpha1.ForeignClusterList{}
		err := c.Client.List(ctx, fcs)
		switch {
		case err == nil && len(fcs.Items) > 0:
			return fmt.Errorf("this cluster still has %d peering(s) (ForeignCluster %s, ...): unpeer first, or pass --force to remove them without telling the peers", len(fcs.Items), fcs.Items[0].Name)
		case err != nil && !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err):
			return c.Unreachable(err)
		}
	}
	if err := offloadings(ctx, s, c, o.Force); err != nil {
		return err
	}
	deleteObj := func(obj client.Object) error {
		err := c.Client.Delete(ctx, obj, client.PropagationPolicy("Background"))
		if err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
			return fmt.Errorf("delete %T %s: %w", obj, obj.GetName(), err)
		}
		return nil
	}
	// What install applies outside annex-system depends only on whether
	// the agent runs with a gateway (the fabric's cluster-wide RBAC): these
	// values render all of it.
	r, err := chart.Render(ctx, chart.Values{ClusterID: "uninstall", Agent: true, Image: "uninstall.invalid/annex-agent:v0", GatewayEndpoint: "192.0.2.1"})
	if err != nil {
		return err
	}
	for _, t := range r.Templates {
		for _, obj := range t.Objects {
			if obj.GetNamespace() == corev1alpha1.AgentNamespace || obj.GetKind() == "Namespace" && obj.GetName() == corev1alpha1.AgentNamespace {
				continue // removed with the namespace
			}
			if err := deleteObj(obj); err != nil {
				return err
			}
		}
	}
	s.Step("removed the admission policies and the agent's cluster-wide RBAC")
	ns := &corev1.Namespace{}
	ns.Name = corev1alpha1.AgentNamespace
	if err := deleteObj(ns); err != nil {
		return err
	}
	crds := r.CRDs
	for _, crd := range crds {
		if err := deleteObj(crd); err != nil {
			return err
		}
	}
	s.Step("deleting namespace %s and %d CustomResourceDefinitions...", corev1alpha1.AgentNamespace, len(crds))
	gone := func(obj client.Object) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			err := c.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		}
	}
	if err := cli.Poll(ctx, 250*time.Millisecond, o.Timeout, "namespace "+ns.Name+" to be deleted", gone(ns)); err != nil {
		return err
	}
	for _, u := range crds {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		crd.Name = u.GetName()
		if err := cli.Poll(ctx, 250*time.Millisecond, o.Timeout, "CRD "+crd.Name+" to be deleted", gone(crd)); err != nil {
			return err
		}
	}
	fmt.Fprintf(s.Out, "Annex is uninstalled from %s.\n", c.Host)
	return nil
}

// offloadingGrace bounds the wait, with --force, for the agent to remove
// the NamespaceOffloadings' finalizers before uninstall removes them.
const offloadingGrace = 30 * time.Second

// offloadings refuses to uninstall while namespaces are offloaded: their
// NamespaceOffloadings carry the agent's finalizer, and with the agent gone
// nothing would remove it (their CRD's deletion would hang). With force it
// deletes them while the agent still runs, and removes the finalizers of
// those still there after offloadingGrace.
func offloadings(ctx context.Context, s cli.IOStreams, c *cli.Cluster, force bool) error {
	list := &offloadingv1alpha1.NamespaceOffloadingList{}
	if err := c.Client.List(ctx, list); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil
		}
		return c.Unreachable(err)
	}
	if len(list.Items) == 0 {
		return nil
	}
	if !force {
		return fmt.Errorf("%d namespace(s) are still offloaded (namespace %s, ...): annexctl unoffload namespace %s first, or pass --force to delete their NamespaceOffloadings",
			len(list.Items), list.Items[0].Namespace, list.Items[0].Namespace)
	}
	for i := range list.Items {
		if err := c.Client.Delete(ctx, &list.Items[i]); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	s.Step("deleting %d NamespaceOffloading(s) (--force)...", len(list.Items))
	deadline := time.Now().Add(offloadingGrace)
	for {
		if err := c.Client.List(ctx, list); err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	for i := range list.Items {
		nso := &list.Items[i]
		patch := client.MergeFrom(nso.DeepCopy())
		nso.Finalizers = nil
		if err := c.Client.Patch(ctx, nso, patch); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	s.Step("removed the finalizers of %d NamespaceOffloading(s) the agent did not process within %s", len(list.Items), offloadingGrace)
	return nil
}
