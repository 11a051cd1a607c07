// Command image builds Annex's container images without Docker or a
// registry (internal/ociimage) and writes one OCI tarball per image into an
// output directory. `make image` runs it. Import a tarball into a node's
// containerd with
//
//	ctr -n k8s.io images import bin/images/annex-agent.tar
//
// Usage:
//
//	go run ./hack/image [-out bin/images] [-version V] [-arch A] [IMAGE...]
//
// IMAGE is annex-agent, pause or echo; the default is all three.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/klog/v2/textlogger"

	"github.com/annexhq/annex/internal/ociimage"
	"github.com/annexhq/annex/internal/version"
)

// images are the images this command builds, by the name on its command line
// (also the tarball's base name).
var images = map[string]func(version string) ociimage.Spec{
	"annex-agent": ociimage.AgentSpec,
	"pause":       ociimage.PauseSpec,
	"echo":        ociimage.EchoSpec,
}

var order = []string{"annex-agent", "pause", "echo"}

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `Build Annex's container images from this source tree, without Docker or a registry.

usage: go run ./hack/image [flags] [IMAGE...]

IMAGE is one of %s (default: all). Each is written to OUT/IMAGE.tar as an
OCI image-layout archive named annex.dev/IMAGE:VERSION. Builds are
reproducible: unchanged sources give byte-identical tarballs, and a tarball
that already holds the image is left alone. Import one into containerd with
  ctr -n k8s.io images import OUT/annex-agent.tar

flags:
`, strings.Join(order, ", "))
		flag.PrintDefaults()
	}
	out := flag.String("out", "bin/images", "directory to write the tarballs to")
	ver := flag.String("version", version.Version, "image tag, also stamped into the binaries (internal/version.Version)")
	arch := flag.String("arch", "", "GOARCH to build for (default: the host's)")
	flag.Parse()

	names := flag.Args()
	if len(names) == 0 {
		names = order
	}
	for _, n := range names {
		if images[n] == nil {
			fmt.Fprintf(os.Stderr, "image: unknown image %q (want one of %s)\n", n, strings.Join(order, ", "))
			os.Exit(2)
		}
	}
	if *ver == "" {
		*ver = version.Version
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, err := ociimage.NewBuilder(ociimage.Options{GOARCH: *arch, Log: textlogger.NewLogger(textlogger.NewConfig())})
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	for _, n := range names {
		img, err := b.Build(ctx, images[n](*ver), filepath.Join(*out, n+".tar"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "image:", err)
			os.Exit(1)
		}
		fmt.Printf("%s\t%s\t%s\n", img.Path, img.Ref, img.Digest)
	}
}
