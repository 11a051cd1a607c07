// Command kube is one binary holding etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kubectl, kubelet and kube-proxy,
// each run the way its upstream main runs it, and localcluster-proxy
// (internal/localclusterproxy: the helper processes of
// internal/localcluster's real nodes). It runs the command named by
// the symlink it is invoked through (bin/kube-apiserver → kube) or by its
// first argument (`kube kubectl version`). Linking them together compiles
// their shared dependencies once and links once instead of seven times.
package main

import (
	"context"
	"fmt"
	"os"

	_ "time/tzdata" // time zones for CronJobs (kube-apiserver, kube-controller-manager)

	"go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's credential plugins
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"

	"github.com/annexhq/annex/tools/kube/internal/localclusterproxy"
	"github.com/annexhq/annex/tools/kube/internal/multicall"
)

// commands run one command with os.Args set to its command line and return
// its exit code. Their keys are multicall.Commands.
var commands = map[string]func() int{
	"etcd": func() int {
		etcdmain.Main(os.Args)
		return 0
	},
	"kube-apiserver":          func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int { return cli.Run(controllermanager.NewControllerManagerCommand()) },
	"kube-scheduler":          func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubelet":                 func() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) },
	"kube-proxy":              func() int { return cli.Run(proxy.NewProxyCommand()) },
	"localcluster-proxy":      func() int { return localclusterproxy.Main(os.Args) },
	"kubectl": func() int {
		_, _ = logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) // as kubectl's main: a bad -v is reported by the flag parser
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err) // prints the error and exits non-zero
		}
		return 0
	},
}

func main() {
	name, args, err := multicall.Resolve(os.Args, multicall.Commands)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	run, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "kube: %s is listed in multicall.Commands but not wired in cmd/kube\n", name)
		os.Exit(2)
	}
	// The commands read os.Args themselves (cobra, etcd's flag parsing,
	// kubectl's plugin lookup), so it becomes the chosen command's line.
	os.Args = args
	os.Exit(run())
}
