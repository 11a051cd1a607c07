// Command localcluster-proxy is a temporary stand-alone build of
// internal/localclusterproxy until the kube multi-call binary dispatches to
// it (symlink name localcluster-proxy).
package main

import (
	"os"

	"github.com/annexhq/annex/tools/kube/internal/localclusterproxy"
)

func main() { os.Exit(localclusterproxy.Main(os.Args)) }
