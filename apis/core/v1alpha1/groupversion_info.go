package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the core.annex.dev API.
	GroupVersion = schema.GroupVersion{Group: "core.annex.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the core.annex.dev types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the core.annex.dev types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
