// Command annex-gateway carries pod traffic between clusters: it programs
// the network namespace it runs in (WireGuard devices, policy routing,
// nftables address translation) from a JSON configuration file and keeps it
// in step with the file. See internal/gateway and docs/network.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2/textlogger"

	"github.com/annexhq/annex/internal/gateway"
)

func main() {
	fs := flag.NewFlagSet("annex-gateway", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "annex-gateway programs this network namespace's links to other clusters from --config\n"+
			"(re-read when it changes) and removes them on SIGTERM. Needs CAP_NET_ADMIN.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	config := fs.String("config", "", "the links to program (JSON, see internal/gateway.Config); required")
	status := fs.String("status", "", "where to write each link's last handshake and byte counters (JSON); none if empty")
	interval := fs.Duration("interval", 2*time.Second, "how often the configuration is checked and the status written")
	_ = fs.Parse(os.Args[1:])
	if *config == "" {
		fs.Usage()
		os.Exit(2)
	}
	log := textlogger.NewLogger(textlogger.NewConfig())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := gateway.Run(ctx, log, gateway.New(log), *config, *status, *interval); err != nil {
		log.Error(err, "Clean-up failed")
		os.Exit(1)
	}
}
