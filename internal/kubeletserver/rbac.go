package kubeletserver

// RBAC of the kubelet endpoint: its serving certificate (a
// CertificateSigningRequest it approves itself) and the SubjectAccessReviews
// that authorize its callers. Reading the client CA is granted by binding
// the built-in Role kube-system/extension-apiserver-authentication-reader
// (charts/annex/templates/rbac/role_binding.yaml).
//
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests,verbs=create;get;list;watch
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests/approval,verbs=update
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=signers,verbs=approve,resourceNames=kubernetes.io/kubelet-serving
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
