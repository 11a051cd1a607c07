package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the networking.annex.dev API.
	GroupVersion = schema.GroupVersion{Group: "networking.annex.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the networking.annex.dev types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the networking.annex.dev types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
