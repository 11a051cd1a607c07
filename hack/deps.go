//go:build deps

// Package hack pins the module's direct dependencies before code uses them.
package hack

import (
	_ "github.com/go-logr/logr"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/spf13/cobra"
	_ "github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	_ "k8s.io/apimachinery/pkg/apis/meta/v1"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/klog/v2"
	_ "sigs.k8s.io/controller-runtime"
)
