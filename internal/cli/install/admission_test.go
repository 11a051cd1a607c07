package install

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/annexhq/annex/charts"
	"github.com/annexhq/annex/internal/cli"
)

// celPolicy is a ValidatingAdmissionPolicy compiled with the API server's
// CEL environment. Its evaluation (eval) stands in for the API server's:
// objects are untyped (the API server also type-checks them against their
// schema; the integration test covers that), nothing is defaulted.
type celPolicy struct {
	name        string
	variables   []celVariable
	validations []celValidation
}

type celVariable struct {
	name string
	prg  cel.Program
}

type celValidation struct {
	expr, message string
	prg, msgPrg   cel.Program
}

func tenantPolicies(t *testing.T) (map[string]*admissionregistrationv1.ValidatingAdmissionPolicy, map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	objs, err := cli.DecodeManifests(charts.FS, "annex/templates/admission/tenant-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]*admissionregistrationv1.ValidatingAdmissionPolicy{}
	bindings := map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	for _, u := range objs {
		var into any
		switch u.GetKind() {
		case "ValidatingAdmissionPolicy":
			p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
			policies[u.GetName()], into = p, p
		case "ValidatingAdmissionPolicyBinding":
			b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			bindings[u.GetName()], into = b, b
		default:
			t.Fatalf("unexpected %s %s in admission/tenant-*.yaml", u.GetKind(), u.GetName())
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true); err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	return policies, bindings
}

func compilePolicy(t *testing.T, p *admissionregistrationv1.ValidatingAdmissionPolicy) *celPolicy {
	t.Helper()
	base, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.NewExpressions)
	if err != nil {
		t.Fatal(err)
	}
	env, err := base.Extend(
		cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType),
		cel.Variable("params", cel.DynType), cel.Variable("request", cel.DynType),
		cel.Variable("namespaceObject", cel.DynType),
		cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		t.Fatal(err)
	}
	compile := func(what, expr string) cel.Program {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("%s %s: %v", p.Name, what, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatalf("%s %s: %v", p.Name, what, err)
		}
		return prg
	}
	out := &celPolicy{name: p.Name}
	for _, v := range p.Spec.Variables {
		out.variables = append(out.variables, celVariable{name: v.Name, prg: compile("variable "+v.Name, v.Expression)})
	}
	for i, v := range p.Spec.Validations {
		cv := celValidation{expr: v.Expression, message: v.Message, prg: compile(fmt.Sprintf("validation %d", i), v.Expression)}
		if v.MessageExpression != "" {
			cv.msgPrg = compile(fmt.Sprintf("messageExpression %d", i), v.MessageExpression)
		}
		out.validations = append(out.validations, cv)
	}
	return out
}

// eval returns the messages of the validations obj fails. An expression
// that does not evaluate is a test failure: the API server would refuse
// with an error that names no rule.
func (p *celPolicy) eval(t *testing.T, op string, obj, old, params any) []string {
	t.Helper()
	vars := map[string]any{}
	act := map[string]any{"object": obj, "oldObject": old, "params": params, "variables": vars,
		"request": map[string]any{"operation": op, "namespace": remoteNS}}
	for _, v := range p.variables {
		val, _, err := v.prg.Eval(act)
		if err != nil {
			t.Fatalf("%s: variable %s: %v", p.name, v.name, err)
		}
		vars[v.name] = val
	}
	var msgs []string
	for _, v := range p.validations {
		val, _, err := v.prg.Eval(act)
		if err != nil {
			t.Fatalf("%s: %s: %v", p.name, v.expr, err)
		}
		if val == types.True {
			continue
		}
		msg := v.message
		if v.msgPrg != nil {
			m, _, err := v.msgPrg.Eval(act)
			if err != nil {
				t.Fatalf("%s: messageExpression of %s: %v", p.name, v.expr, err)
			}
			msg, _ = m.Value().(string)
		}
		msgs = append(msgs, msg)
	}
	return msgs
}

func toUnstructured(t *testing.T, obj any) map[string]any {
	t.Helper()
	if obj == nil {
		return nil
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// checkRefusal compares the messages of eval with a case's want.
func checkRefusal(t *testing.T, msgs []string, want string) {
	t.Helper()
	switch {
	case want == "" && len(msgs) > 0:
		t.Errorf("refused, want admitted: %q", msgs)
	case want != "" && len(msgs) == 0:
		t.Errorf("admitted, want refused with %q", want)
	case want != "" && !strings.Contains(strings.Join(msgs, "\n"), want):
		t.Errorf("refused with %q, want %q", msgs, want)
	}
}

func defaultParams(t *testing.T) map[string]any { return toUnstructured(t, providerPolicy(t)) }

func TestTenantPodsPolicy(t *testing.T) {
	policies, _ := tenantPolicies(t)
	p := compilePolicy(t, policies["annex-tenant-pods"])
	for _, tc := range podCases() {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: remoteNS}, Spec: kwokPodSpec()}
			tc.mutate(&pod.Spec)
			checkRefusal(t, p.eval(t, "CREATE", toUnstructured(t, pod), nil, defaultParams(t)), tc.want)
		})
	}
}

// TestTenantPodsParams: what the provider policy ConfigMap allows is
// allowed, and nothing else.
func TestTenantPodsParams(t *testing.T) {
	policies, _ := tenantPolicies(t)
	p := compilePolicy(t, policies["annex-tenant-pods"])
	cases := podCases()
	byName := map[string]podCase{}
	for _, c := range cases {
		byName[c.name] = c
	}
	for _, tc := range []struct {
		name   string
		data   map[string]string // merged into the defaults
		pod    string            // a case of podCases
		want   string
		noData bool
	}{
		{name: "control-plane toleration allowed", pod: "toleration of the control plane",
			data: map[string]string{PolicyKeyTolerationKeys: "node.kubernetes.io/not-ready, node-role.kubernetes.io/control-plane ,node.kubernetes.io/unreachable"}},
		{name: "hostname allowed", pod: "required node affinity on hostname", data: map[string]string{PolicyKeyNodeLabelKeys: "kubernetes.io/hostname"}},
		{name: "node name allowed", pod: "required node affinity on a node name", data: map[string]string{PolicyKeyNodeLabelKeys: "metadata.name"}},
		{name: "priority class allowed", pod: "priority class", data: map[string]string{PolicyKeyPriorityClasses: "other," + testPriorityClass}},
		{name: "runtime class allowed", pod: "runtime class", data: map[string]string{PolicyKeyRuntimeClasses: testRuntimeClass}},
		{name: "scheduler allowed", pod: "scheduler", data: map[string]string{PolicyKeySchedulerNames: "greedy"}},
		{name: "default scheduler without allowedSchedulerNames", pod: "default scheduler named", data: map[string]string{}},
		{name: "persistentVolumeClaim allowed", pod: "persistentVolumeClaim volume", data: map[string]string{PolicyKeyVolumeTypes: "emptyDir, persistentVolumeClaim"}},
		{name: "emptyDir no longer allowed", pod: "volumes of the default types", data: map[string]string{PolicyKeyVolumeTypes: "configMap,secret,projected,downwardAPI"},
			want: `spec.volumes: scratch (emptyDir) not allowed`},
		{name: "every taint stays refused", pod: "toleration of every taint", data: map[string]string{PolicyKeyTolerationKeys: ",node.kubernetes.io/not-ready,,node.kubernetes.io/unreachable"},
			want: `"" (tolerates every taint)`},
		{name: "empty list allows nothing", pod: "kwok sandbox pod", data: map[string]string{PolicyKeyTolerationKeys: ""},
			want: `spec.tolerations: key(s) "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable" not allowed by this provider (allowedTolerationKeys in ConfigMap annex-system/annex-provider-policy: "")`},
		{name: "ConfigMap without data", pod: "allowed nodeSelector", noData: true, want: `spec.nodeSelector: key(s)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc, ok := byName[tc.pod]
			if !ok {
				t.Fatalf("no pod case %q", tc.pod)
			}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: remoteNS}, Spec: kwokPodSpec()}
			pc.mutate(&pod.Spec)
			cm := providerPolicy(t)
			for k, v := range tc.data {
				cm.Data[k] = v
			}
			if tc.noData {
				cm.Data = nil
			}
			checkRefusal(t, p.eval(t, "CREATE", toUnstructured(t, pod), nil, toUnstructured(t, cm)), tc.want)
		})
	}
}

func TestTenantServicesPolicy(t *testing.T) {
	policies, _ := tenantPolicies(t)
	p := compilePolicy(t, policies["annex-tenant-services"])
	for _, tc := range serviceCases() {
		t.Run(tc.name, func(t *testing.T) {
			svc := clusterIPService("s")
			var old any
			op := "CREATE"
			if tc.update {
				op, old = "UPDATE", toUnstructured(t, svc.DeepCopy())
			}
			tc.mutate(svc)
			checkRefusal(t, p.eval(t, op, toUnstructured(t, svc), old, nil), tc.want)
		})
	}
}

func TestTenantShadowPodsPolicy(t *testing.T) {
	policies, _ := tenantPolicies(t)
	p := compilePolicy(t, policies["annex-tenant-shadowpods"])
	for _, tc := range shadowPodCases() {
		t.Run(tc.name, func(t *testing.T) {
			sp := shadowPod("sp")
			var old any
			op := "CREATE"
			if tc.update {
				op, old = "UPDATE", toUnstructured(t, sp.DeepCopy())
			}
			if tc.mutate != nil {
				tc.mutate(sp)
			}
			checkRefusal(t, p.eval(t, op, toUnstructured(t, sp), old, nil), tc.want)
		})
	}
}

// TestTenantPolicyShapes: every tenant policy follows the shared rules
// (docs/security.md): named annex-tenant-*, failing closed, scoped to the
// tenants' namespaces, each validation a 422 whose message names the
// policy, bound with Deny; annex-tenant-pods takes the provider policy
// ConfigMap and refuses everything without it.
func TestTenantPolicyShapes(t *testing.T) {
	policies, bindings := tenantPolicies(t)
	if got, want := len(policies), 11; got != want {
		t.Errorf("%d tenant policies, want %d", got, want)
	}
	wantSelector := &metav1.LabelSelector{
		MatchLabels:      map[string]string{"annex.dev/managed-by": "annex"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "annex.dev/remote-cluster-id", Operator: metav1.LabelSelectorOpExists}},
	}
	for name, p := range policies {
		t.Run(name, func(t *testing.T) {
			if !strings.HasPrefix(name, "annex-tenant-") {
				t.Errorf("policy name %q does not start with annex-tenant-", name)
			}
			if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
				t.Errorf("failurePolicy %v, want Fail", p.Spec.FailurePolicy)
			}
			want := wantSelector
			if name == "annex-tenant-namespace" || name == "annex-tenant-namespace-metadata" {
				// The tenant namespaces themselves (internal/cli/peer).
				want = &metav1.LabelSelector{MatchLabels: map[string]string{"annex.dev/managed-by": "annex", "annex.dev/tenant": "true"}}
			}
			if diff := cmp.Diff(want, p.Spec.MatchConstraints.NamespaceSelector); diff != "" {
				t.Errorf("namespaceSelector (-want +got):\n%s", diff)
			}
			for _, v := range p.Spec.Validations {
				if v.Reason == nil || *v.Reason != metav1.StatusReasonInvalid {
					t.Errorf("validation %q: reason %v, want Invalid", v.Expression, v.Reason)
				}
				if !strings.Contains(v.Message+v.MessageExpression, name+": ") {
					t.Errorf("validation %q: neither message %q nor messageExpression names %q", v.Expression, v.Message, name+": ")
				}
			}
			b, ok := bindings[name]
			if !ok {
				t.Fatalf("no binding %s", name)
			}
			if b.Spec.PolicyName != name || !cmp.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
				t.Errorf("binding: policy %q, actions %v; want %s, [Deny]", b.Spec.PolicyName, b.Spec.ValidationActions, name)
			}
		})
	}
	p, b := policies["annex-tenant-pods"], bindings["annex-tenant-pods"]
	if p == nil || b == nil {
		t.Fatal("no annex-tenant-pods policy and binding")
	}
	if diff := cmp.Diff(&admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}, p.Spec.ParamKind); diff != "" {
		t.Errorf("annex-tenant-pods paramKind (-want +got):\n%s", diff)
	}
	deny := admissionregistrationv1.DenyAction
	want := &admissionregistrationv1.ParamRef{Name: ProviderPolicyName, Namespace: "annex-system", ParameterNotFoundAction: &deny}
	if diff := cmp.Diff(want, b.Spec.ParamRef); diff != "" {
		t.Errorf("annex-tenant-pods paramRef (-want +got):\n%s", diff)
	}
}

// TestProviderPolicyDefaults: the defaults are the shared decision's.
func TestProviderPolicyDefaults(t *testing.T) {
	want := map[string]string{
		"allowedTolerationKeys":  "node.kubernetes.io/not-ready,node.kubernetes.io/unreachable",
		"allowedNodeLabelKeys":   "kubernetes.io/os,kubernetes.io/arch,topology.kubernetes.io/zone,topology.kubernetes.io/region,node.kubernetes.io/instance-type",
		"allowedPriorityClasses": "",
		"allowedRuntimeClasses":  "",
		"allowedSchedulerNames":  "default-scheduler",
		"allowedVolumeTypes":     "emptyDir,configMap,secret,projected,downwardAPI",
		"tenantMaxMetadataBytes": "65536",
		"tenantMaxDataBytes":     "262144",
		"tenantMaxEventBytes":    "4096",
		"tenantMaxPodBytes":      "65536",
	}
	cm := providerPolicy(t)
	if diff := cmp.Diff(want, cm.Data); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if cm.Namespace != "annex-system" || cm.Name != "annex-provider-policy" {
		t.Errorf("ConfigMap %s/%s", cm.Namespace, cm.Name)
	}
	if got := providerPolicy(t, "a", "b").Data[PolicyKeyPriorityClasses]; got != "a,b" {
		t.Errorf("priority classes %q, want a,b", got)
	}
}

// TestTenantPodsProjections: a projected volume may carry ConfigMaps,
// Secrets, the downward API and the pod's token, never a pod certificate or
// a cluster trust bundle, whatever allowedVolumeTypes says. (Not among
// podCases: the API server drops these sources when their feature gates are
// off, and refuses the emptied projection before the policy sees it.)
func TestTenantPodsProjections(t *testing.T) {
	policies, _ := tenantPolicies(t)
	p := compilePolicy(t, policies["annex-tenant-pods"])
	for _, tc := range []struct {
		name   string
		source corev1.VolumeProjection
		want   string
	}{
		{name: "downward API", source: corev1.VolumeProjection{DownwardAPI: &corev1.DownwardAPIProjection{}}},
		{name: "Secret", source: corev1.VolumeProjection{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}}},
		{name: "cluster trust bundle", source: corev1.VolumeProjection{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Path: "ca"}},
			want: "annex-tenant-pods: spec.volumes: projected v: clusterTrustBundle: only configMap, secret, downwardAPI and serviceAccountToken sources may be projected"},
		{name: "pod certificate", source: corev1.VolumeProjection{PodCertificate: &corev1.PodCertificateProjection{SignerName: "example.com/s", KeyType: "ED25519"}},
			want: "annex-tenant-pods: spec.volumes: projected v: podCertificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: remoteNS}, Spec: kwokPodSpec()}
			pod.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{tc.source}}}}}
			checkRefusal(t, p.eval(t, "CREATE", toUnstructured(t, pod), nil, defaultParams(t)), tc.want)
		})
	}
}

// TestTenantPoliciesCompile: every expression of every tenant policy
// compiles in the API server's CEL environment (those without a case of
// their own here are exercised by TestTenantAdmission and the e2e attacks).
func TestTenantPoliciesCompile(t *testing.T) {
	policies, _ := tenantPolicies(t)
	for name, p := range policies {
		t.Run(name, func(t *testing.T) { compilePolicy(t, p) })
	}
}
