package ociimage

import (
	"context"

	"github.com/annexhq/annex/internal/version"
)

// PauseRef, EchoRef and AgentRef name the images of this build's version
// (internal/version.Version), which Pause, Echo and Agent write.
func PauseRef() string { return PauseSpec(version.Version).Ref() }

// EchoRef names the echo image of this build's version.
func EchoRef() string { return EchoSpec(version.Version).Ref() }

// AgentRef names the annex-agent image of this build's version.
func AgentRef() string { return AgentSpec(version.Version).Ref() }

// Pause writes the pause image of this build's version to outPath, built for
// the host from the source tree around the working directory. Quick when
// outPath already holds it (see Builder.Build).
func Pause(ctx context.Context, outPath string) (Image, error) {
	return buildDefault(ctx, PauseSpec(version.Version), outPath)
}

// Echo writes the echo test image of this build's version to outPath, like
// Pause.
func Echo(ctx context.Context, outPath string) (Image, error) {
	return buildDefault(ctx, EchoSpec(version.Version), outPath)
}

// Agent writes the annex-agent image of this build's version to outPath,
// like Pause.
func Agent(ctx context.Context, outPath string) (Image, error) {
	return buildDefault(ctx, AgentSpec(version.Version), outPath)
}

func buildDefault(ctx context.Context, spec Spec, outPath string) (Image, error) {
	b, err := NewBuilder(Options{})
	if err != nil {
		return Image{}, err
	}
	return b.Build(ctx, spec, outPath)
}
