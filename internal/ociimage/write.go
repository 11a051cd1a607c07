package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image is an image tarball the Builder wrote (or found up to date).
type Image struct {
	Ref  string // name:tag, as `ctr images ls` lists it
	Path string // the tarball
	// Digest is the manifest digest ("sha256:…"), as `ctr images ls` shows
	// it after the import.
	Digest string
	// ID is the digest of the image config ("sha256:…"), which covers the
	// layer's contents (its DiffID): equal IDs mean equal images.
	ID string
	// Written is false when Path already held this image and was kept.
	Written bool
}

// Build writes spec's image tarball to outPath (its directory is created).
// When outPath already holds the image built from the same sources (see
// sourceKey) it is left alone without compiling anything; otherwise the
// binaries are compiled (go's build cache keeps that quick when only some
// changed) and the tarball is written anew.
func (b *Builder) Build(ctx context.Context, spec Spec, outPath string) (Image, error) {
	if err := spec.validate(); err != nil {
		return Image{}, err
	}
	start := time.Now()
	key, err := b.sourceKey(ctx, spec)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: listing its sources: %w", spec.Ref(), err)
	}
	if have, err := readArchive(outPath); err == nil && have.Ref == spec.Ref() && have.SourceKey == key {
		b.log.Info("image up to date", "image", have.Ref, "digest", have.Digest, "path", outPath, "took", time.Since(start).Round(time.Millisecond))
		return Image{Ref: have.Ref, Path: outPath, Digest: have.Digest, ID: have.ID}, nil
	}

	tmp, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return Image{}, err
	}
	defer os.RemoveAll(tmp) //nolint:errcheck // best-effort clean-up of a temp dir
	bins, err := b.compile(ctx, spec, tmp)
	if err != nil {
		return Image{}, err
	}
	img, err := b.image(spec, bins)
	if err != nil {
		return Image{}, err
	}
	id, err := img.ConfigName()
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", spec.Ref(), err)
	}
	digest, err := img.Digest()
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", spec.Ref(), err)
	}
	if err := writeTarball(outPath, spec.Ref(), key, img); err != nil {
		return Image{}, fmt.Errorf("image %s: writing %s: %w", spec.Ref(), outPath, err)
	}
	b.log.Info("wrote image", "image", spec.Ref(), "digest", digest.String(), "path", outPath, "took", time.Since(start).Round(time.Millisecond))
	return Image{Ref: spec.Ref(), Path: outPath, Digest: digest.String(), ID: id.String(), Written: true}, nil
}

// image assembles spec's image from built binaries (name → path).
func (b *Builder) image(spec Spec, bins map[string]string) (v1.Image, error) {
	entries, err := layerEntries(bins, spec.FileOwner)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref(), err)
	}
	l, err := newLayer(entries)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref(), err)
	}
	return newImage(spec, b.arch, l)
}

// Annotations of the image in the archive's index.json: containerd names the
// imported image after the first, the OCI image-layout spec after the second.
// The third records the source key the image was built from.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
	annotationSourceKey      = "dev.annex.ociimage.source-key"
)

// writeTarball writes img named ref as an OCI image-layout archive at p,
// through a temporary file renamed into place.
func writeTarball(p, ref, sourceKey string, img v1.Image) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { //nolint:gosec // an output directory like bin/images
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) //nolint:errcheck // gone after the rename
	if err := writeArchive(f, ref, sourceKey, img); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

// writeArchive writes the OCI image layout of img (named ref) as a tar
// archive, in a fixed order (oci-layout, index.json, then the manifest, config
// and layer blobs) with fixed headers, so equal images give equal bytes and
// index.json is found without reading the layers.
func writeArchive(w io.Writer, ref, sourceKey string, img v1.Image) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return err
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	mediaType, err := img.MediaType()
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return err
	}
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: mediaType,
			Size:      int64(len(manifest)),
			Digest:    digest,
			Platform:  &v1.Platform{OS: cf.OS, Architecture: cf.Architecture},
			Annotations: map[string]string{
				annotationContainerdName: tag.Name(),
				annotationRefName:        tag.TagStr(),
				annotationSourceKey:      sourceKey,
			},
		}},
	})
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	dir := func(name string) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: Epoch, Format: tar.FormatPAX})
	}
	file := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, ModTime: Epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		n, err := io.Copy(tw, r)
		if err == nil && n != size {
			err = fmt.Errorf("%s: %d bytes, expected %d", name, n, size)
		}
		return err
	}
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	layout := []byte(`{"imageLayoutVersion":"1.0.0"}`)
	if err := file("oci-layout", int64(len(layout)), bytes.NewReader(layout)); err != nil {
		return err
	}
	if err := file("index.json", int64(len(index)), bytes.NewReader(index)); err != nil {
		return err
	}
	if err := dir("blobs/"); err != nil {
		return err
	}
	if err := dir("blobs/sha256/"); err != nil {
		return err
	}
	if err := file(blob(digest), int64(len(manifest)), bytes.NewReader(manifest)); err != nil {
		return err
	}
	if err := file(blob(configName), int64(len(config)), bytes.NewReader(config)); err != nil {
		return err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		err = file(blob(d), size, rc)
		_ = rc.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// archive is what readArchive learns of an image tarball.
type archive struct {
	Ref       string // from io.containerd.image.name
	Digest    string // of the manifest
	ID        string // digest of the config
	SourceKey string
}

// readArchive reads index.json and the manifest of the one image in the OCI
// archive at p, without reading the layers (writeArchive puts them last).
func readArchive(p string) (archive, error) {
	f, err := os.Open(p) //nolint:gosec // a tarball this package wrote
	if err != nil {
		return archive{}, err
	}
	defer f.Close() //nolint:errcheck // read-only
	var a archive
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return archive{}, fmt.Errorf("%s: no index.json or no manifest of its image", p)
		}
		if err != nil {
			return archive{}, err
		}
		switch {
		case h.Name == "index.json":
			var idx v1.IndexManifest
			if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&idx); err != nil {
				return archive{}, fmt.Errorf("%s: index.json: %w", p, err)
			}
			if len(idx.Manifests) != 1 {
				return archive{}, fmt.Errorf("%s holds %d images, not one", p, len(idx.Manifests))
			}
			d := idx.Manifests[0]
			a.Ref, a.Digest, a.SourceKey = d.Annotations[annotationContainerdName], d.Digest.String(), d.Annotations[annotationSourceKey]
		case a.Digest != "" && h.Name == "blobs/"+strings.Replace(a.Digest, ":", "/", 1):
			var m v1.Manifest
			if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&m); err != nil {
				return archive{}, fmt.Errorf("%s: manifest: %w", p, err)
			}
			a.ID = m.Config.Digest.String()
			return a, nil
		}
	}
}
