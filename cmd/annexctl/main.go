// Command annexctl installs Annex, peers clusters, offloads namespaces and
// runs a local sandbox of real clusters. Its commands are thin layers over the
// internal/cli packages.
package main

import (
	"fmt"
	"os"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/annexhq/annex/internal/cli"
)

func main() {
	// annexctl shows no controller-runtime logs; saying so keeps
	// controller-runtime from printing a warning with a stack trace when
	// its first client is made more than 30 s after start (as in `sandbox
	// up --real-nodes`).
	ctrllog.SetLogger(logr.Discard())
	streams := cli.StdStreams()
	root := newRootCommand(streams)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(streams.ErrOut, "Error:", err)
		os.Exit(1)
	}
}
