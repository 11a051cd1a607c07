package ociimage

import (
	"archive/tar"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Epoch is the time every image claims: its creation time, its history entry's
// and every file's modification time. A fixed time makes builds reproducible.
var Epoch = time.Unix(0, 0).UTC()

// entry is one file or directory of the layer, in archive form.
type entry struct {
	Name string // relative to the image root, no leading slash
	Dir  bool   // a directory (Path and Data are empty)
	Mode int64  // permission bits (and the sticky bit)
	UID  int
	GID  int
	Data []byte // contents of a small file written from memory
	Path string // contents of a file read from disk (a built binary)
	Size int64  // size of the file at Path
}

// baseEntries are the files every image has besides its binaries: a
// world-writable /tmp and an /etc/passwd and /etc/group naming root, the
// nonroot user (65532) most images run as and nobody, so that user lookups
// work. Owned by root.
func baseEntries() []entry {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
	group := "root:x:0:\nnonroot:x:65532:\nnogroup:x:65534:\n"
	return []entry{
		{Name: "etc", Dir: true, Mode: 0o755},
		{Name: "etc/group", Mode: 0o644, Data: []byte(group)},
		{Name: "etc/passwd", Mode: 0o644, Data: []byte(passwd)},
		{Name: "tmp", Dir: true, Mode: 0o1777},
	}
}

// layerEntries lists the layer's entries in a fixed order (sorted by name):
// the base files, then each binary at the root, mode 0755, owned by owner.
func layerEntries(binaries map[string]string, owner Owner) ([]entry, error) {
	entries := baseEntries()
	for name, p := range binaries {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("binary %s: %w", name, err)
		}
		entries = append(entries, entry{Name: name, Mode: 0o755, UID: owner.UID, GID: owner.GID, Path: p, Size: fi.Size()})
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.Name, b.Name) })
	for i := 1; i < len(entries); i++ {
		if entries[i].Name == entries[i-1].Name {
			return nil, fmt.Errorf("two files named /%s in one image: rename the binary", entries[i].Name)
		}
	}
	return entries, nil
}

// writeLayerTar writes entries as an uncompressed tar archive whose bytes
// depend only on the entries: fixed modification times, numeric owners
// without names, one archive format.
func writeLayerTar(w io.Writer, entries []entry) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.Name,
			Mode:    e.Mode,
			Uid:     e.UID,
			Gid:     e.GID,
			ModTime: Epoch,
			Format:  tar.FormatPAX,
		}
		switch {
		case e.Dir:
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		case e.Path != "":
			h.Typeflag = tar.TypeReg
			h.Size = e.Size
		default:
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("layer entry %s: %w", e.Name, err)
		}
		switch {
		case e.Path != "":
			if err := copyFile(tw, e.Path, e.Size); err != nil {
				return fmt.Errorf("layer entry %s: %w", e.Name, err)
			}
		case !e.Dir:
			if _, err := tw.Write(e.Data); err != nil {
				return fmt.Errorf("layer entry %s: %w", e.Name, err)
			}
		}
	}
	return tw.Close()
}

// copyFile copies exactly size bytes of the file at p into w; a file that
// changed size since it was listed is an error, not a corrupt archive.
func copyFile(w io.Writer, p string, size int64) error {
	f, err := os.Open(p) //nolint:gosec // p is a binary this package just built
	if err != nil {
		return err
	}
	defer f.Close() //nolint:errcheck // read-only
	n, err := io.Copy(w, io.LimitReader(f, size))
	if err != nil {
		return err
	}
	if extra, _ := f.Read(make([]byte, 1)); n != size || extra != 0 {
		return fmt.Errorf("%s changed size while being packed (expected %d bytes)", p, size)
	}
	return nil
}

// layer is the image's single layer: its tar archive is generated from the
// entries whenever it is read, so a large binary is never held in memory.
// go-containerregistry compresses it (gzip) when it needs the compressed form.
type layer struct {
	entries []entry
	diffID  v1.Hash
}

var _ partial.UncompressedLayer = (*layer)(nil)

// newLayer makes the layer and computes its DiffID (the sha256 of the tar).
func newLayer(entries []entry) (v1.Layer, error) {
	h := sha256.New()
	if err := writeLayerTar(h, entries); err != nil {
		return nil, err
	}
	l := &layer{entries: entries, diffID: v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", h.Sum(nil))}}
	return partial.UncompressedToLayer(l)
}

func (l *layer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *layer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }

func (l *layer) Uncompressed() (io.ReadCloser, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeLayerTar(pw, l.entries)) }()
	return pr, nil
}
