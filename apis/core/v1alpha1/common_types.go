package v1alpha1

// SecretReference points at a Secret by namespace and name.
type SecretReference struct {
	// namespace is the namespace of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`

	// name is the name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// Condition types shared by several kinds.
const (
	// ConditionReady is the summary condition of ResourceSlice (see also
	// ConditionAccepted) and VirtualNode: True when the object does what it
	// asks for.
	ConditionReady = "Ready"
)
