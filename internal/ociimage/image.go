package ociimage

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// configFile is the image config of spec for linux/arch, without its layers
// (mutate.Append adds their DiffIDs and history).
func configFile(spec Spec, arch string) *v1.ConfigFile {
	return &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Created:      v1.Time{Time: Epoch},
		Config: v1.Config{
			Entrypoint: slices.Clone(spec.Entrypoint),
			Cmd:        slices.Clone(spec.Cmd),
			User:       spec.User,
			Env:        slices.Clone(spec.Env),
			WorkingDir: spec.WorkingDir,
			Labels:     maps.Clone(spec.Labels),
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
}

// history is the one history entry of the image's one layer.
func history(spec Spec) v1.History {
	names := make([]string, 0, len(spec.Binaries))
	for _, b := range spec.Binaries {
		names = append(names, "/"+b.Name+" from "+b.Package)
	}
	return v1.History{
		Created:   v1.Time{Time: Epoch},
		CreatedBy: "github.com/annexhq/annex/internal/ociimage: " + strings.Join(names, ", "),
		Comment:   "Annex " + spec.Version,
	}
}

// newImage assembles an OCI image from the config of spec and one layer.
func newImage(spec Spec, arch string, l v1.Layer) (v1.Image, error) {
	img, err := mutate.ConfigFile(empty.Image, configFile(spec, arch))
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", spec.Ref(), err)
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: history(spec), MediaType: types.OCILayer})
	if err != nil {
		return nil, fmt.Errorf("image %s: layer: %w", spec.Ref(), err)
	}
	return img, nil
}
