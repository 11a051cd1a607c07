// Command annex-agent runs Annex in one cluster: the controllers and the
// virtual nodes of every peering, in one leader-elected manager.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/annexhq/annex/internal/agent"
	"github.com/annexhq/annex/internal/version"
)

func main() {
	opts := agent.DefaultOptions()
	logCfg := textlogger.NewConfig()
	fs := pflag.NewFlagSet("annex-agent", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "annex-agent %s runs Annex in one cluster: peering, offloading and virtual nodes.\n\nUsage: annex-agent [flags]\n\nFlags:\n%s", version.Version, fs.FlagUsages())
	}
	opts.BindFlags(fs)
	gofs := flag.NewFlagSet("log", flag.ContinueOnError)
	logCfg.AddFlags(gofs)
	fs.AddGoFlagSet(gofs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == pflag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	log := textlogger.NewLogger(logCfg)
	ctrl.SetLogger(log)
	klog.SetLogger(log)

	if err := opts.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "annex-agent:", err)
		os.Exit(2)
	}
	cfg, err := opts.RESTConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "annex-agent:", err)
		os.Exit(1)
	}
	mgr, err := agent.NewManager(cfg, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "annex-agent:", err)
		os.Exit(1)
	}
	log.Info("starting annex-agent", "version", version.Version, "namespace", opts.Namespace)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
