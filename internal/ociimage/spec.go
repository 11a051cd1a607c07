// Package ociimage owns Annex's container images built without Docker or a
// registry: what each image holds (annex-agent, the sandbox's pause image,
// the echo test image), cross-compiling their static Go binaries from this
// module, packing them with go-containerregistry into one reproducible layer
// and config, and writing the tarball that `ctr -n k8s.io images import`
// (containerd 1.6 and later) and `docker load` accept.
//
// Two builds of the same sources with the same Go toolchain give
// byte-identical tarballs: binaries are built with CGO_ENABLED=0, -trimpath,
// -buildvcs=false and fixed ldflags; files, history and config carry the
// fixed Epoch; tar headers carry numeric owners only.
package ociimage

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Repositories of the images this package builds. A tag is the Annex version
// (internal/version.Version of the build), e.g. annex.dev/pause:v0.1.0-dev.
const (
	AgentRepository = "annex.dev/annex-agent"
	PauseRepository = "annex.dev/pause"
	EchoRepository  = "annex.dev/echo"
)

// Owner is a numeric user and group.
type Owner struct {
	UID int
	GID int
}

// Binary is one main package of this module, built into the image root.
type Binary struct {
	// Package is the main package, relative to the module root
	// ("./cmd/annex-agent").
	Package string
	// Name is the binary's file name at the image root ("annex-agent" is
	// /annex-agent).
	Name string
}

// Spec says what one image holds.
type Spec struct {
	Repository string // e.g. AgentRepository
	Tag        string // e.g. the Annex version
	Binaries   []Binary
	// Version is stamped into the binaries' internal/version.Version.
	Version string
	// FileOwner owns the binaries (other files are root's). Zero is 0:0.
	FileOwner Owner

	Entrypoint []string
	Cmd        []string
	User       string   // "uid:gid", numeric so that runAsNonRoot can check it
	Env        []string // "KEY=value"
	WorkingDir string
	Labels     map[string]string
}

// Ref is the image's name and tag, as containerd and the kubelet see it.
func (s Spec) Ref() string { return s.Repository + ":" + s.Tag }

func (s Spec) validate() error {
	if _, err := name.NewTag(s.Ref(), name.StrictValidation); err != nil {
		return fmt.Errorf("image %q: not a valid name:tag (%w)", s.Ref(), err)
	}
	if len(s.Binaries) == 0 {
		return fmt.Errorf("image %s: no binaries to put in it", s.Ref())
	}
	for _, b := range s.Binaries {
		if !strings.HasPrefix(b.Package, "./") {
			return fmt.Errorf("image %s: package %q must be relative to the module root (start with ./)", s.Ref(), b.Package)
		}
		if b.Name == "" || strings.ContainsAny(b.Name, "/\\") || b.Name == "." || b.Name == ".." {
			return fmt.Errorf("image %s: binary name %q must be a plain file name", s.Ref(), b.Name)
		}
	}
	if s.Version == "" {
		return fmt.Errorf("image %s: no version to stamp into the binaries", s.Ref())
	}
	return nil
}

// Users the images run as.
const (
	// NonRootUser is distroless's "nonroot" user, which the Dockerfile's
	// image runs as too.
	NonRootUser = "65532:65532"
	// PauseUser is the user of Kubernetes's own pause image.
	PauseUser = "65535:65535"
)

// pathEnv lets `kubectl exec` find the image's binaries by name.
const pathEnv = "PATH=/"

// AgentSpec is the image `annexctl install --image` deploys, with the same
// contents as the Dockerfile's: /annex-agent (the entrypoint),
// /annex-gateway (the gateway container's command) and /annex-fabric (the
// node agent's), run as 65532:65532.
func AgentSpec(version string) Spec {
	return Spec{
		Repository: AgentRepository,
		Tag:        version,
		Version:    version,
		Binaries: []Binary{
			{Package: "./cmd/annex-agent", Name: "annex-agent"},
			{Package: "./cmd/annex-gateway", Name: "annex-gateway"},
			{Package: "./cmd/annex-fabric", Name: "annex-fabric"},
		},
		Entrypoint: []string{"/annex-agent"},
		User:       NonRootUser,
		Env:        []string{pathEnv},
		WorkingDir: "/",
	}
}

// PauseSpec is the CRI sandbox image of real nodes (images/pause): PID 1 of
// every pod, reaping children until SIGTERM.
func PauseSpec(version string) Spec {
	return Spec{
		Repository: PauseRepository,
		Tag:        version,
		Version:    version,
		Binaries:   []Binary{{Package: "./images/pause", Name: "pause"}},
		Entrypoint: []string{"/pause"},
		User:       PauseUser,
		Env:        []string{pathEnv},
		WorkingDir: "/",
	}
}

// EchoSpec is the test image (images/echo): /echo-server, an HTTP server on
// $PORT (8080) by default, with the shell-free subcommands `say` and `get`
// for `kubectl exec`. Runs as 65532:65532.
func EchoSpec(version string) Spec {
	return Spec{
		Repository: EchoRepository,
		Tag:        version,
		Version:    version,
		Binaries:   []Binary{{Package: "./images/echo", Name: "echo-server"}},
		Entrypoint: []string{"/echo-server"},
		User:       NonRootUser,
		Env:        []string{pathEnv},
		WorkingDir: "/",
	}
}
