package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/localcluster/clustertest"
)

// TestTenantAdmission installs into a real API server (with a global
// default PriorityClass, which every pod gets) and, as the
// identities that write there (the provider's agent for pods, the
// consumer's ServiceAccount for Services and ShadowPods), tries every case
// of admission_cases_test.go: each forbidden one is refused with HTTP 422
// (reason Invalid, what the agent and the consumer's reflector treat as a
// final refusal) naming the rule, and the legitimate ones pass. Then the
// provider policy ConfigMap: an edit takes effect, install keeps it, and
// without it every tenant pod is refused until install creates it again.
func TestTenantAdmission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lc := clustertest.Start(ctx, t, localcluster.Options{Name: "adm", PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", Nodes: 1,
		BeforeControllers: clustertest.ApplyCRDs})
	c := clustertest.Connect(ctx, t, lc)
	install := func() string {
		t.Helper()
		o := DefaultOptions()
		o.ClusterID, o.LocalAgent = "prov", true
		var out bytes.Buffer
		if err := Run(ctx, cli.IOStreams{Out: &out, ErrOut: &out}, c, o); err != nil {
			t.Fatalf("install: %v\n%s", err, out.String())
		}
		return out.String()
	}
	// A provider with a global default PriorityClass: the API server gives
	// it to every pod that names none, so install allows it.
	if err := c.Client.Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "provider-default"},
		Value: 10, GlobalDefault: true}); err != nil {
		t.Fatal(err)
	}
	if out := install(); !strings.Contains(out, `provider policy ConfigMap annex-system/annex-provider-policy with the defaults`) ||
		!strings.Contains(out, `priority classes "provider-default"`) {
		t.Errorf("install output does not tell it created the provider policy allowing provider-default:\n%s", out)
	}

	// What the provider's agent and the peering set up for consumer c1.
	admin := c.Client
	tenantNS := corev1alpha1.TenantNamespaceName("c1")
	labels := map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelRemoteClusterID: "c1"}
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS, Labels: labels}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: remoteNS, Labels: labels}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "annex-consumer", Namespace: remoteNS},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "annex-remote-consumer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: corev1alpha1.ConsumerServiceAccountName, Namespace: tenantNS}}},
		&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: testPriorityClass}, Value: 1000000},
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: testRuntimeClass}, Handler: "runsc"},
	} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
		}
	}
	agent := impersonate(t, c, "annex-system", "annex-agent")
	tenant := impersonate(t, c, tenantNS, corev1alpha1.ConsumerServiceAccountName)
	// A provider that lets tenants' objects carry the annotations of these
	// domains (admission/metadata-keys.yaml removes them by default): the
	// load-balancer ones among them are still refused.
	policy := &corev1.ConfigMap{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: "annex-system", Name: ProviderPolicyName}, policy); err != nil {
		t.Fatal(err)
	}
	policy.Data[PolicyKeyAnnotationDomains] = "service.beta.kubernetes.io, metallb.universe.tf"
	if err := admin.Update(ctx, policy); err != nil {
		t.Fatal(err)
	}

	// Pods need their namespace's default ServiceAccount.
	poll(ctx, t, "the default ServiceAccount of "+remoteNS, func() error {
		return admin.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: "default"}, &corev1.ServiceAccount{})
	})
	// The API server type-checks each policy against the schemas of what it
	// matches: a warning is an expression that would not work as written.
	for _, name := range []string{"annex-tenant-pods", "annex-tenant-services", "annex-tenant-shadowpods"} {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		poll(ctx, t, "type checking of "+name, func() error {
			if err := admin.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
				return err
			}
			if p.Status.TypeChecking == nil || p.Status.ObservedGeneration != p.Generation {
				return errors.New("not type-checked yet")
			}
			return nil
		})
		for _, w := range p.Status.TypeChecking.ExpressionWarnings {
			t.Errorf("%s: %s: %s", name, w.FieldRef, w.Warning)
		}
	}

	createPod := func(spec corev1.PodSpec) error {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: remoteNS}, Spec: spec}
		return agent.Create(ctx, pod, client.DryRunAll)
	}
	// A policy and its binding take a moment to take effect: wait until a
	// known-bad object of each is refused.
	everyTaint := kwokPodSpec()
	tolerate("", corev1.TolerationOpExists)(&everyTaint)
	pollRefused(ctx, t, "annex-tenant-pods", func() error { return createPod(everyTaint) })
	pollRefused(ctx, t, "annex-tenant-services", func() error {
		svc := clusterIPService("probe")
		svc.Spec.Type = corev1.ServiceTypeNodePort
		return tenant.Create(ctx, svc, client.DryRunAll)
	})
	pollRefused(ctx, t, `metadata.annotations "metallb.universe.tf/LoadBalancerIPs" not allowed`, func() error {
		svc := clusterIPService("probe")
		svc.Annotations = map[string]string{"metallb.universe.tf/LoadBalancerIPs": "192.0.2.3"}
		return tenant.Create(ctx, svc, client.DryRunAll)
	})
	probe := shadowPod("probe")
	if err := tenant.Create(ctx, probe); err != nil {
		t.Fatal(err)
	}
	pollRefused(ctx, t, "annex-tenant-shadowpods", func() error {
		sp := probe.DeepCopy()
		sp.Spec.Pod.Containers[0].Image = "evil"
		return tenant.Update(ctx, sp, client.DryRunAll)
	})

	kwok := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: remoteNS}, Spec: kwokPodSpec()}
	if err := agent.Create(ctx, kwok, client.DryRunAll); err != nil {
		t.Fatalf("kwok pod: %v", err)
	}
	if kwok.Spec.PriorityClassName != "provider-default" || len(kwok.Spec.Tolerations) != 2 || kwok.Spec.SchedulerName != corev1.DefaultSchedulerName {
		t.Errorf("kwok pod admitted with priorityClassName %q, tolerations %v, schedulerName %q; want provider-default, not-ready and unreachable, default-scheduler",
			kwok.Spec.PriorityClassName, kwok.Spec.Tolerations, kwok.Spec.SchedulerName)
	}

	t.Run("pods", func(t *testing.T) {
		for _, tc := range podCases() {
			t.Run(tc.name, func(t *testing.T) {
				spec := kwokPodSpec()
				tc.mutate(&spec)
				checkAPIRefusal(t, createPod(spec), tc.want, false)
			})
		}
	})
	t.Run("services", func(t *testing.T) {
		for i, tc := range serviceCases() {
			t.Run(tc.name, func(t *testing.T) {
				svc := clusterIPService(fmt.Sprintf("svc-%d", i))
				if tc.update {
					if err := tenant.Create(ctx, svc); err != nil {
						t.Fatal(err)
					}
					tc.mutate(svc)
					checkAPIRefusal(t, tenant.Update(ctx, svc, client.DryRunAll), tc.want, tc.apiRefuses)
					return
				}
				tc.mutate(svc)
				checkAPIRefusal(t, tenant.Create(ctx, svc, client.DryRunAll), tc.want, tc.apiRefuses)
			})
		}
	})
	t.Run("metadata keys", func(t *testing.T) {
		testMetadataKeys(ctx, t, admin, tenant)
	})
	t.Run("shadowpods", func(t *testing.T) {
		for i, tc := range shadowPodCases() {
			t.Run(tc.name, func(t *testing.T) {
				sp := shadowPod(fmt.Sprintf("sp-%d", i))
				if tc.update {
					if err := tenant.Create(ctx, sp); err != nil {
						t.Fatal(err)
					}
					tc.mutate(sp)
					checkAPIRefusal(t, tenant.Update(ctx, sp, client.DryRunAll), tc.want, false)
					return
				}
				if tc.mutate != nil {
					tc.mutate(sp)
				}
				checkAPIRefusal(t, tenant.Create(ctx, sp, client.DryRunAll), tc.want, false)
			})
		}
	})

	t.Run("provider policy", func(t *testing.T) {
		// The operator allows a toleration: the next pod is checked against it.
		key := client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: ProviderPolicyName}
		cm := &corev1.ConfigMap{}
		if err := admin.Get(ctx, key, cm); err != nil {
			t.Fatal(err)
		}
		edited := cm.Data[PolicyKeyTolerationKeys] + ",node-role.kubernetes.io/control-plane"
		cm.Data[PolicyKeyTolerationKeys] = edited
		if err := admin.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
		controlPlane := kwokPodSpec()
		tolerate("node-role.kubernetes.io/control-plane", corev1.TolerationOpExists)(&controlPlane)
		poll(ctx, t, "the edited provider policy to allow the control-plane toleration", func() error { return createPod(controlPlane) })

		// install keeps the operator's ConfigMap.
		if out := install(); !strings.Contains(out, "kept the provider policy ConfigMap annex-system/annex-provider-policy") {
			t.Errorf("install output does not tell it kept the provider policy:\n%s", out)
		}
		if err := admin.Get(ctx, key, cm); err != nil {
			t.Fatal(err)
		}
		if got := cm.Data[PolicyKeyTolerationKeys]; got != edited {
			t.Errorf("after install, %s = %q, want the operator's %q", PolicyKeyTolerationKeys, got, edited)
		}

		// Without it, every tenant pod is refused, until install creates it again.
		if err := admin.Delete(ctx, cm); err != nil {
			t.Fatal(err)
		}
		var refusal error
		poll(ctx, t, "tenant pods to be refused without the provider policy", func() error {
			if refusal = createPod(kwokPodSpec()); refusal == nil {
				return errors.New("admitted")
			}
			return nil
		})
		t.Logf("without the provider policy: %v (422: %v)", refusal, apierrors.IsInvalid(refusal))
		if out := install(); !strings.Contains(out, "with the defaults") {
			t.Errorf("install did not create the provider policy again:\n%s", out)
		}
		poll(ctx, t, "the kwok pod to be admitted with the defaults again", func() error { return createPod(kwokPodSpec()) })
		pollRefused(ctx, t, "spec.tolerations", func() error { return createPod(controlPlane) })
	})
}

// impersonate returns a client acting as ServiceAccount ns/name.
func impersonate(t *testing.T, c *cli.Cluster, ns, name string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	cl, err := client.New(cfg, client.Options{Scheme: c.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// poll waits until try succeeds.
func poll(ctx context.Context, t *testing.T, what string, try func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		last = try()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last: %v)", what, err, last)
	}
}

// pollRefused waits until try is refused with a 422 containing want.
func pollRefused(ctx context.Context, t *testing.T, want string, try func() error) {
	t.Helper()
	poll(ctx, t, "a refusal naming "+want, func() error {
		err := try()
		if apierrors.IsInvalid(err) && strings.Contains(err.Error(), want) {
			return nil
		}
		return fmt.Errorf("got %v", err)
	})
}

// checkAPIRefusal checks the API server's answer against a case: admitted
// when want is empty, else refused with HTTP 422 (reason Invalid) by the
// policy (the message contains want) or, with apiRefuses, by the API
// server's own validation before the policy.
func checkAPIRefusal(t *testing.T, err error, want string, apiRefuses bool) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("refused, want admitted: %v", err)
	case want == "":
	case err == nil:
		t.Errorf("admitted, want refused with %q", want)
	case !apierrors.IsInvalid(err):
		t.Errorf("refused with %v (reason %s), want HTTP 422 Invalid", err, apierrors.ReasonForError(err))
	case apiRefuses && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"):
		t.Errorf("refused by a policy (%v), want by the API server's own validation (fix the case)", err)
	case !apiRefuses && !strings.Contains(err.Error(), want):
		t.Errorf("refused with %q, want %q", err.Error(), want)
	}
	if err != nil {
		t.Logf("refused: %v", err)
		var status apierrors.APIStatus
		if errors.As(err, &status) && status.Status().Code != 422 {
			t.Errorf("HTTP %d, want 422: %v", status.Status().Code, err)
		}
	}
}
