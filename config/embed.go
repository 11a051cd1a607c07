// Package config owns the manifests `annexctl install` applies: the generated
// CRDs (config/crd) and the agent's RBAC (config/rbac: role.yaml is generated
// from the agent's kubebuilder markers, the rest is written by hand).
package config

import "embed"

// FS holds crd/*.yaml and rbac/*.yaml.
//
//go:embed crd/*.yaml rbac/*.yaml
var FS embed.FS
