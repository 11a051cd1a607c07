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

const usage = `annex-gateway carries pod traffic between clusters. It programs the network
namespace it runs in from --config, applies the file again whenever it changes
(looked at every 250 ms; and every 30 s, repairing what else changed), and
removes everything it programmed on SIGTERM or SIGINT. The annex-agent started
with --gateway-config writes that file from the cluster's NetworkConfigurations.

For every link it runs a userspace WireGuard device "annex-<peer>" (needs
/dev/net/tun, no kernel module), a policy rule of priority 1000 with firewall
mark and routing table 0x4e58xxxx, and rules in the nftables table "ip annex"
that translate addresses at the sender and drop new connections from the peer
to anything but the link's "accept" list, kept in the interval set
"accept-<peer>". A file that changes only accept lists refills those sets in
one transaction (chains, connections and WireGuard sessions stay); any other
change rebuilds the table in one transaction. Needs CAP_NET_ADMIN and IPv4
forwarding. A killed gateway leaves its rules and table; the next one
replaces them (packets meanwhile are refused, never delivered locally).

The file (JSON; unknown fields, non-IPv4 prefixes and more than 65536 accept
entries per link are refused):
  {"links": [{"peer": "gamma",            the remote cluster's ID
     "listenPort": 51820,                 this side's UDP port for the link
     "privateKey": "<base64>", "peerPublicKey": "<base64>",
     "peerEndpoint": "192.168.77.3:51820",
     "routes": ["100.64.0.0/16"],         the peer's CIDRs in this cluster's view
     "dnat": [{"from": "100.64.0.0/16", "to": "10.200.0.0/16"}],
     "snat": [{"from": "10.200.0.0/16", "to": "100.65.0.0/16"}],
     "allowedSources": ["10.200.0.0/16", "100.64.0.0/16"],
     "transit": [{"address": "10.70.0.22", "to": "100.64.0.11"}],
     "masquerade": "10.70.0.1",
     "accept": ["10.200.4.0/30", "10.200.4.9/32", "10.70.0.22/32"]}]}
                                          what the peer may open connections to,
                                          in this cluster's own addresses (the
                                          agent writes the pods of the peer's
                                          remote namespaces and its transit
                                          addresses, or the whole pod CIDR with
                                          --gateway-peer-access=all); empty: nothing
See docs/network.md ("How the gateway does it").

Flags:
`

func main() {
	fs := flag.NewFlagSet("annex-gateway", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	config := fs.String("config", "", "the links to program (JSON, below); required")
	status := fs.String("status", "", "where to write each link's last handshake and byte counters (JSON); none if empty")
	interval := fs.Duration("interval", 2*time.Second, "how often the configuration is checked and the status written")
	check := fs.Bool("check", false, "only check the configuration file and exit (0: valid)")
	_ = fs.Parse(os.Args[1:])
	if *config == "" || fs.NArg() > 0 {
		fs.Usage()
		os.Exit(2)
	}
	if *check {
		data, err := os.ReadFile(*config)
		if err == nil {
			_, err = gateway.ParseConfig(data)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", *config, err)
			os.Exit(1)
		}
		return
	}
	log := textlogger.NewLogger(textlogger.NewConfig())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := gateway.Run(ctx, log, gateway.New(log), *config, *status, *interval); err != nil {
		log.Error(err, "Clean-up failed")
		os.Exit(1)
	}
}
