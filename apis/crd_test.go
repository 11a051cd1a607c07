// Package apis_test checks the generated CRDs in charts/annex/crds the way the API
// server does: structural schema, CEL compilation and cost budget, and the
// behaviour of the validation rules and defaults written as markers.
package apis_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	netv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	offv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

const crdDir = "../charts/annex/crds"

// crdVersion is the v1alpha1 version of one CRD, ready to validate objects.
type crdVersion struct {
	structural *schema.Structural
	schema     validation.SchemaValidator
	cel        *cel.Validator
}

func loadCRDs(t *testing.T) map[string]crdVersion {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s: %v", crdDir, err)
	}
	out := map[string]crdVersion{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		v1crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, v1crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(v1crd)
		crd := &apiextensions.CustomResourceDefinition{}
		if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(v1crd, crd, nil); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), crd); len(errs) > 0 {
			t.Errorf("%s: the API server would reject this CRD: %v", f, errs.ToAggregate())
			continue
		}
		// The internal version hoists a schema shared by every version to
		// spec.validation.
		validationSchema := crd.Spec.Validation
		if validationSchema == nil {
			validationSchema = crd.Spec.Versions[0].Schema
		}
		props := validationSchema.OpenAPIV3Schema
		s, err := schema.NewStructural(props)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		sv, _, err := validation.NewSchemaValidator(props)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[crd.Spec.Names.Kind] = crdVersion{structural: s, schema: sv, cel: cel.NewValidator(s, true, celconfig.PerCallLimit)}
	}
	return out
}

func toMap(t *testing.T, obj runtime.Object) map[string]any {
	t.Helper()
	if obj == nil {
		return nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// validate returns the errors the API server would report for creating obj
// (old == nil) or updating old to obj, after defaulting obj.
func (c crdVersion) validate(obj, old map[string]any) field.ErrorList {
	defaulting.Default(obj, c.structural)
	var errs field.ErrorList
	if old == nil {
		errs = validation.ValidateCustomResource(nil, obj, c.schema)
	} else {
		errs = validation.ValidateCustomResourceUpdate(nil, obj, old, c.schema)
	}
	celErrs, _ := c.cel.Validate(context.Background(), nil, c.structural, obj, old, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

func foreignCluster(name, clusterID, url string) *corev1alpha1.ForeignCluster {
	return &corev1alpha1.ForeignCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1alpha1.ForeignClusterSpec{
			ClusterID:            clusterID,
			APIServerURL:         url,
			CredentialsSecretRef: &corev1alpha1.SecretReference{Namespace: "annex-system", Name: "beta-kubeconfig"},
		},
	}
}

func virtualNode(nodeName string) *corev1alpha1.VirtualNode {
	return &corev1alpha1.VirtualNode{
		ObjectMeta: metav1.ObjectMeta{Name: "beta", Namespace: "annex-peer-beta"},
		Spec: corev1alpha1.VirtualNodeSpec{
			ClusterID:            "beta",
			NodeName:             nodeName,
			Resources:            corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")},
			CredentialsSecretRef: corev1alpha1.SecretReference{Namespace: "annex-peer-beta", Name: "kubeconfig"},
		},
	}
}

func namespaceOffloading(name string, mapping offv1alpha1.NamespaceMappingStrategy) *offv1alpha1.NamespaceOffloading {
	return &offv1alpha1.NamespaceOffloading{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo"},
		Spec:       offv1alpha1.NamespaceOffloadingSpec{NamespaceMappingStrategy: mapping},
	}
}

func shadowPod(mutate func(*corev1.PodSpec)) *offv1alpha1.ShadowPod {
	sp := &offv1alpha1.ShadowPod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "demo-alpha"},
		Spec: offv1alpha1.ShadowPodSpec{
			Pod: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
		},
	}
	if mutate != nil {
		mutate(&sp.Spec.Pod)
	}
	return sp
}

func shadowEndpointSlice(addressType discoveryv1.AddressType) *offv1alpha1.ShadowEndpointSlice {
	return &offv1alpha1.ShadowEndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-abcde", Namespace: "demo-alpha"},
		Spec: offv1alpha1.ShadowEndpointSliceSpec{Template: offv1alpha1.EndpointSliceTemplate{
			AddressType: addressType,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.5"}}},
		}},
	}
}

func networkConfiguration(remotePodCIDR, remappedPodCIDR string) *netv1alpha1.NetworkConfiguration {
	nc := &netv1alpha1.NetworkConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "beta", Namespace: "annex-system"},
		Spec: netv1alpha1.NetworkConfigurationSpec{
			RemoteClusterID: "beta",
			Local:           netv1alpha1.ClusterCIDRs{PodCIDR: "10.1.0.0/16", ExternalCIDR: "10.201.0.0/16"},
			Remote:          netv1alpha1.ClusterCIDRs{PodCIDR: remotePodCIDR, ExternalCIDR: "10.202.0.0/16"},
		},
	}
	if remappedPodCIDR != "" {
		nc.Status.RemappedRemote = &netv1alpha1.RemappedCIDRs{PodCIDR: remappedPodCIDR}
	}
	return nc
}

func TestCRDValidation(t *testing.T) {
	crds := loadCRDs(t)
	tests := []struct {
		name    string
		kind    string
		obj     runtime.Object
		old     runtime.Object // nil for a create
		wantErr string         // substring of the aggregated errors; "" for none
	}{
		{name: "valid ForeignCluster", kind: "ForeignCluster", obj: foreignCluster("beta", "beta", "https://127.0.0.1:6443")},
		{name: "ForeignCluster without URL", kind: "ForeignCluster", obj: &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "alpha"}}},
		{name: "ForeignCluster name differs from clusterID", kind: "ForeignCluster", obj: foreignCluster("other", "beta", "https://127.0.0.1:6443"), wantErr: "metadata.name must equal spec.clusterID"},
		{name: "ForeignCluster http URL", kind: "ForeignCluster", obj: foreignCluster("beta", "beta", "http://127.0.0.1:6443"), wantErr: "must be an https URL"},
		{name: "ForeignCluster bad clusterID", kind: "ForeignCluster", obj: foreignCluster("Beta_1", "Beta_1", ""), wantErr: "spec.clusterID"},
		{name: "ForeignCluster clusterID changed", kind: "ForeignCluster", obj: foreignCluster("beta", "gamma", ""), old: foreignCluster("beta", "beta", ""), wantErr: "clusterID is immutable"},
		{name: "ForeignCluster marked unreachable", kind: "ForeignCluster", obj: func() runtime.Object {
			fc := foreignCluster("beta", "beta", "https://127.0.0.1:6443")
			fc.Spec.Unreachable = true
			return fc
		}(), old: foreignCluster("beta", "beta", "https://127.0.0.1:6443")},
		{name: "ResourceSlice to itself", kind: "ResourceSlice", obj: &corev1alpha1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "annex-tenant-alpha"},
			Spec: corev1alpha1.ResourceSliceSpec{ConsumerClusterID: "alpha", ProviderClusterID: "alpha",
				Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
		}, wantErr: "must differ"},
		{name: "valid VirtualNode", kind: "VirtualNode", obj: virtualNode("")},
		{name: "VirtualNode nodeName changed", kind: "VirtualNode", obj: virtualNode("b"), old: virtualNode("a"), wantErr: "nodeName is immutable"},
		{name: "VirtualNode nodeName added", kind: "VirtualNode", obj: virtualNode("b"), old: virtualNode(""), wantErr: "nodeName cannot be added or removed"},
		{name: "valid NamespaceOffloading", kind: "NamespaceOffloading", obj: namespaceOffloading("offloading", "")},
		{name: "NamespaceOffloading wrong name", kind: "NamespaceOffloading", obj: namespaceOffloading("demo", ""), wantErr: "must be named 'offloading'"},
		{name: "NamespaceOffloading mapping changed", kind: "NamespaceOffloading", obj: namespaceOffloading("offloading", offv1alpha1.NamespaceMappingEnforceSameName), old: namespaceOffloading("offloading", offv1alpha1.NamespaceMappingDefaultName), wantErr: "namespaceMappingStrategy is immutable"},
		{name: "NamespaceOffloading mapping set to its default", kind: "NamespaceOffloading", obj: namespaceOffloading("offloading", offv1alpha1.NamespaceMappingDefaultName), old: namespaceOffloading("offloading", "")},
		{name: "valid ShadowPod", kind: "ShadowPod", obj: shadowPod(nil)},
		{name: "ShadowPod with nodeName", kind: "ShadowPod", obj: shadowPod(func(p *corev1.PodSpec) { p.NodeName = "annex-beta" }), wantErr: "pod.nodeName must not be set"},
		{name: "ShadowPod with hostNetwork", kind: "ShadowPod", obj: shadowPod(func(p *corev1.PodSpec) { p.HostNetwork = true }), wantErr: "pod.hostNetwork is not allowed"},
		{name: "ShadowPod with hostPID", kind: "ShadowPod", obj: shadowPod(func(p *corev1.PodSpec) { p.HostPID = true }), wantErr: "pod.hostPID is not allowed"},
		{name: "ShadowPod with hostIPC", kind: "ShadowPod", obj: shadowPod(func(p *corev1.PodSpec) { p.HostIPC = true }), wantErr: "pod.hostIPC is not allowed"},
		{name: "valid ShadowEndpointSlice", kind: "ShadowEndpointSlice", obj: shadowEndpointSlice(discoveryv1.AddressTypeIPv4)},
		{name: "ShadowEndpointSlice addressType changed", kind: "ShadowEndpointSlice", obj: shadowEndpointSlice(discoveryv1.AddressTypeIPv6), old: shadowEndpointSlice(discoveryv1.AddressTypeIPv4), wantErr: "addressType is immutable"},
		{name: "valid NetworkConfiguration", kind: "NetworkConfiguration", obj: networkConfiguration("10.1.0.0/16", "10.71.0.0/16")},
		{name: "NetworkConfiguration IPv6", kind: "NetworkConfiguration", obj: networkConfiguration("fd00:10::/64", "")},
		{name: "NetworkConfiguration host bits", kind: "NetworkConfiguration", obj: networkConfiguration("10.1.0.1/16", ""), wantErr: "podCIDR must be a CIDR in canonical form"},
		{name: "NetworkConfiguration not a CIDR", kind: "NetworkConfiguration", obj: networkConfiguration("10.1.0.0", ""), wantErr: "podCIDR must be a CIDR in canonical form"},
		{name: "NetworkConfiguration bad remap", kind: "NetworkConfiguration", obj: networkConfiguration("10.1.0.0/16", "10.71.0.0/33"), wantErr: "podCIDR must be empty or a CIDR"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			crd, ok := crds[tc.kind]
			if !ok {
				t.Fatalf("no CRD for kind %s", tc.kind)
			}
			errs := crd.validate(toMap(t, tc.obj), toMap(t, tc.old))
			switch {
			case tc.wantErr == "" && len(errs) > 0:
				t.Errorf("unexpected errors: %v", errs.ToAggregate())
			case tc.wantErr != "" && len(errs) == 0:
				t.Errorf("no error, want one containing %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(errs.ToAggregate().Error(), tc.wantErr):
				t.Errorf("errors %v, want one containing %q", errs.ToAggregate(), tc.wantErr)
			}
		})
	}
}

func TestCRDDefaults(t *testing.T) {
	crd := loadCRDs(t)["NamespaceOffloading"]
	obj := toMap(t, &offv1alpha1.NamespaceOffloading{ObjectMeta: metav1.ObjectMeta{Name: "offloading", Namespace: "demo"}})
	delete(obj, "spec")
	defaulting.Default(obj, crd.structural)
	got := &offv1alpha1.NamespaceOffloading{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, got); err != nil {
		t.Fatal(err)
	}
	want := offv1alpha1.NamespaceOffloadingSpec{
		PodOffloadingStrategy:    offv1alpha1.PodOffloadingLocalAndRemote,
		NamespaceMappingStrategy: offv1alpha1.NamespaceMappingDefaultName,
	}
	if diff := cmp.Diff(want, got.Spec); diff != "" {
		t.Errorf("defaulted spec (-want +got):\n%s", diff)
	}
}
