package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The attacks on the provider's storage of TestHostileConsumer: objects a
// tenant may write, made as large or as many as it can
// (charts/annex/templates/admission/tenant-bytes.yaml, the ResourceQuota
// annex-tenant-quota and ClusterRole annex-remote-consumer;
// docs/security.md, "Bytes"). Each returns nil when the attack was refused
// or bounded.

// The default bounds of the provider policy (tenantMax*Bytes).
const (
	attackMaxMetadataBytes = 64 << 10
	attackMaxDataBytes     = 256 << 10
	attackMaxEventBytes    = 4 << 10
)

// attackSecretBudget is the provider's budget of Secrets per tenant in
// TestHostileConsumer (--tenant-object-budget).
const attackSecretBudget = 12

// secretsPastTheBudgetRefused: Secrets created in turn in two remote
// namespaces, until none has been admitted for 5 s: the refusals name the
// share of the budget (ResourceQuota annex-tenant-share), the tenant stores
// no more Secrets than its budget in both namespaces together, and it
// reached it (the budget goes where the tenant writes). They are deleted
// again.
func secretsPastTheBudgetRefused(ctx context.Context, tenant, provider client.Client, namespaces ...string) error {
	var made []*corev1.Secret
	defer func() {
		for _, s := range made {
			_ = tenant.Delete(context.Background(), s)
		}
	}()
	last := time.Now()
	for i := 0; time.Since(last) < 5*time.Second; i++ {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespaces[i%len(namespaces)], Name: fmt.Sprintf("budget-%d", i)}}
		err := tenant.Create(ctx, s)
		if err == nil {
			made, last = append(made, s), time.Now()
			continue
		}
		if err := refused(err, "annex-tenant-share"); err != nil {
			return fmt.Errorf("Secret %d: %w", i, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stored := 0
	for _, ns := range namespaces {
		list := &corev1.SecretList{}
		if err := provider.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		stored += len(list.Items)
	}
	if stored != attackSecretBudget {
		return fmt.Errorf("%d Secrets admitted; the two namespaces hold %d, want the budget, %d", len(made), stored, attackSecretBudget)
	}
	return nil
}

// configMapOfOneMiBRefused: a ConfigMap of 1 MiB of data (keys and values,
// which Kubernetes itself allows) is refused by annex-tenant-configmaps.
func configMapOfOneMiBRefused(ctx context.Context, tenant client.Client, ns string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "one-mib"},
		Data: map[string]string{"a": strings.Repeat("x", 512<<10-1), "b": strings.Repeat("x", 512<<10-1)}}
	return refused(tenant.Create(ctx, cm), "annex-tenant-configmaps")
}

// secretOverTheBoundRefused: a Secret one byte over the bound of its data
// is refused by annex-tenant-secrets, and one of exactly the bound is not
// (it is deleted again).
func secretOverTheBoundRefused(ctx context.Context, tenant client.Client, ns string) error {
	over := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "over-the-bound"},
		Data: map[string][]byte{"k": []byte(strings.Repeat("x", attackMaxDataBytes))}}
	if err := refused(tenant.Create(ctx, over), "annex-tenant-secrets"); err != nil {
		return err
	}
	at := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "at-the-bound"},
		Data: map[string][]byte{"k": []byte(strings.Repeat("x", attackMaxDataBytes-1))}}
	if err := tenant.Create(ctx, at); err != nil {
		return fmt.Errorf("a Secret of exactly %d bytes was refused: %w", attackMaxDataBytes, err)
	}
	return tenant.Delete(ctx, at)
}

// annotationsOverTheBoundRefused: a Service (any kind the tenant writes)
// whose annotations are over the metadata bound is refused by
// annex-tenant-metadata, on creation and on update.
func annotationsOverTheBoundRefused(ctx context.Context, tenant client.Client, ns string) error {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fat-annotations"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(80)}}}}
	// A key without a domain: annex-tenant-metadata-keys would remove the
	// key of a domain the provider does not allow before its size counts.
	blob := map[string]string{"blob": strings.Repeat("x", attackMaxMetadataBytes)}
	fat := svc.DeepCopy()
	fat.Annotations = blob
	if err := refused(tenant.Create(ctx, fat), "annex-tenant-metadata"); err != nil {
		return fmt.Errorf("creation: %w", err)
	}
	if err := tenant.Create(ctx, svc); err != nil {
		return fmt.Errorf("a plain Service: %w", err)
	}
	defer func() { _ = tenant.Delete(context.Background(), svc) }()
	svc.Annotations = blob
	if err := refused(tenant.Update(ctx, svc), "annex-tenant-metadata"); err != nil {
		return fmt.Errorf("update: %w", err)
	}
	return nil
}

// eventsRefused: the tenant cannot store Events in its remote namespace at
// all (ClusterRole annex-remote-consumer grants no create on Events):
// Kubernetes' ResourceQuota cannot count Events, so nothing else would bound
// an Event flood. Neither a small Event nor a flood of them is stored.
func eventsRefused(ctx context.Context, tenant, provider client.Client, ns string) error {
	event := func(name, message string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			InvolvedObject: corev1.ObjectReference{Kind: "ShadowPod", APIVersion: "offloading.annex.dev/v1alpha1", Namespace: ns, Name: "flood-target"},
			Reason:         "Flood", Message: message, Type: corev1.EventTypeNormal}
	}
	for i := range 20 {
		err := tenant.Create(ctx, event(fmt.Sprintf("flood-%03d", i), strings.Repeat("x", 3<<10)))
		if !apierrors.IsForbidden(err) {
			return fmt.Errorf("Event %d: %v, want Forbidden", i, err)
		}
	}
	if err := refused(tenant.Create(ctx, event("too-big", strings.Repeat("x", attackMaxEventBytes))), ""); err != nil {
		return fmt.Errorf("an Event over the size bound: %w", err)
	}
	list := &corev1.EventList{}
	if err := provider.List(ctx, list, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, e := range list.Items {
		if e.Reason == "Flood" {
			return fmt.Errorf("Event %s of the flood is stored", e.Name)
		}
	}
	return nil
}
