// Package config owns the manifests `annexctl install` applies: the generated
// CRDs (config/crd) and the agent's RBAC (config/rbac: role.yaml is generated
// from the agent's kubebuilder markers, the rest is written by hand) and the
// admission policies (config/admission): the one that lets offloaded pods onto
// virtual nodes, and the annex-tenant-* ones that hold a provider's tenants to
// what they may write into their namespaces there.
package config

import "embed"

// FS holds crd/*.yaml, rbac/*.yaml and admission/*.yaml.
//
//go:embed crd/*.yaml rbac/*.yaml admission/*.yaml
var FS embed.FS
