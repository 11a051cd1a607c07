// Package clustertest holds the set-up shared by integration tests that run
// against real API servers started by internal/localcluster: starting a
// cluster (skipped with -short or without the Kubernetes binaries, stopped
// with the test), clients, a controller manager run for the test,
// installing Annex's CRDs, and the small must and eventually helpers. It is
// for tests only: no production code may import
// it.
package clustertest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/annexhq/annex/charts"
	"github.com/annexhq/annex/internal/agent"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/localcluster"
)

// Start starts a local cluster for an integration test and stops it when the
// test ends (reporting a failed stop as a test error). The test is skipped
// with -short and when the Kubernetes binaries are missing. An empty o.Dir
// becomes a directory named o.Name under t.TempDir(). ctx bounds the startup
// only.
func Start(ctx context.Context, t *testing.T, o localcluster.Options) *localcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	binDir := o.BinDir
	if binDir == "" {
		binDir = localcluster.DefaultBinDir()
	}
	if err := localcluster.CheckBinaries(binDir); err != nil {
		t.Skipf("integration test needs the real Kubernetes binaries: %v", err)
	}
	if o.Dir == "" {
		o.Dir = filepath.Join(t.TempDir(), o.Name)
	}
	lc, err := localcluster.Start(ctx, o)
	if lc != nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := lc.Stop(ctx); err != nil {
				t.Errorf("stop cluster %s: %v", lc.Name(), err)
			}
		})
	}
	Must(t, err)
	return lc
}

// Scheme returns the agent's scheme with the apiextensions types (for the
// CRDs) and whatever add registers.
func Scheme(t *testing.T, add ...func(*runtime.Scheme) error) *runtime.Scheme {
	t.Helper()
	s, err := agent.Scheme()
	Must(t, err)
	for _, f := range append([]func(*runtime.Scheme) error{apiextensionsv1.AddToScheme}, add...) {
		Must(t, f(s))
	}
	return s
}

// Client returns the cluster's admin REST config and a client of it with
// scheme.
func Client(t *testing.T, lc *localcluster.Cluster, scheme *runtime.Scheme) (client.Client, *rest.Config) {
	t.Helper()
	cfg, err := lc.RESTConfig()
	Must(t, err)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	Must(t, err)
	return c, cfg
}

// Connect connects to the cluster as annexctl does with its admin
// kubeconfig.
func Connect(ctx context.Context, t *testing.T, lc *localcluster.Cluster) *cli.Cluster {
	t.Helper()
	c, err := cli.Connect(ctx, lc.KubeconfigPath(), 15*time.Second)
	Must(t, err)
	return c
}

// InstallCRDs applies Annex's CRDs with c (whose scheme must know the
// apiextensions types) and waits until they are established.
func InstallCRDs(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	Must(t, applyCRDs(ctx, c))
}

// ApplyCRDs is a localcluster.Options.BeforeControllers that applies
// Annex's CRDs, for tests that install Annex and need not wait for the
// quota controller to discover them (install.waitQuotaCounts).
func ApplyCRDs(ctx context.Context, lc *localcluster.Cluster) error {
	cfg, err := lc.RESTConfig()
	if err != nil {
		return err
	}
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return err
	}
	return applyCRDs(ctx, c)
}

func applyCRDs(ctx context.Context, c client.Client) error {
	objs, err := cli.DecodeManifests(charts.FS, "annex/crds/*.yaml")
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := cli.Apply(ctx, c, o); err != nil {
			return err
		}
	}
	for _, o := range objs {
		err := cli.Poll(ctx, 100*time.Millisecond, 30*time.Second, "CRD "+o.GetName()+" established", func(ctx context.Context) (bool, error) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: o.GetName()}, crd); err != nil {
				return false, err
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Must fails the test at once on an error.
func Must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Eventually polls cond until it returns nil, failing the test with what and
// cond's last error after timeout.
func Eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// NewManager is a controller manager on cfg for a test: no metrics or
// health listeners, and controller names may repeat (each test registers
// its own). mutate, if given, changes the options first (a cache's
// ByObject, for one).
func NewManager(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, mutate ...func(*ctrl.Options)) ctrl.Manager {
	t.Helper()
	o := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}
	for _, m := range mutate {
		m(&o)
	}
	mgr, err := ctrl.NewManager(cfg, o)
	Must(t, err)
	return mgr
}

// RunManager starts mgr until ctx ends or the test does, and reports an
// error it stops with as a test error.
func RunManager(ctx context.Context, t *testing.T, mgr ctrl.Manager) {
	t.Helper()
	ctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}
