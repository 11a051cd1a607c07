// Command annexctl installs Annex, peers clusters, offloads namespaces and
// runs a local sandbox of real clusters. Its commands are thin layers over the
// internal/cli packages.
package main

import (
	"fmt"
	"os"

	"github.com/annexhq/annex/internal/cli"
)

func main() {
	streams := cli.StdStreams()
	root := newRootCommand(streams)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(streams.ErrOut, "Error:", err)
		os.Exit(1)
	}
}
