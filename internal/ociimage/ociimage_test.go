package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// header is what the tests compare of a tar entry.
type header struct {
	Name     string
	Typeflag byte
	Mode     int64
	UID, GID int
	Uname    string
	ModTime  time.Time
	Content  string // regular files only
}

func readTar(t *testing.T, r io.Reader) []header {
	t.Helper()
	var out []header
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("reading tar: %v", err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("reading %s: %v", h.Name, err)
		}
		out = append(out, header{Name: h.Name, Typeflag: h.Typeflag, Mode: h.Mode, UID: h.Uid, GID: h.Gid,
			Uname: h.Uname, ModTime: h.ModTime.UTC(), Content: string(data)})
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLayerTar(t *testing.T) {
	dir := t.TempDir()
	bins := map[string]string{
		"zeta":        writeFile(t, dir, "zeta", "zeta binary"),
		"annex-agent": writeFile(t, dir, "a", "agent binary"),
	}
	base := func() []header {
		return []header{
			{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: Epoch},
			{Name: "etc/group", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: Epoch, Content: "root:x:0:\nnonroot:x:65532:\nnogroup:x:65534:\n"},
			{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: Epoch, Content: "root:x:0:0:root:/root:/sbin/nologin\n" +
				"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"},
			{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: Epoch},
		}
	}
	for _, tc := range []struct {
		name  string
		owner Owner
		want  []header
	}{
		{"root-owned binaries", Owner{}, append([]header{
			{Name: "annex-agent", Typeflag: tar.TypeReg, Mode: 0o755, ModTime: Epoch, Content: "agent binary"},
		}, append(base(),
			header{Name: "zeta", Typeflag: tar.TypeReg, Mode: 0o755, ModTime: Epoch, Content: "zeta binary"})...)},
		{"nonroot-owned binaries", Owner{UID: 65532, GID: 65532}, append([]header{
			{Name: "annex-agent", Typeflag: tar.TypeReg, Mode: 0o755, UID: 65532, GID: 65532, ModTime: Epoch, Content: "agent binary"},
		}, append(base(),
			header{Name: "zeta", Typeflag: tar.TypeReg, Mode: 0o755, UID: 65532, GID: 65532, ModTime: Epoch, Content: "zeta binary"})...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entries, err := layerEntries(bins, tc.owner)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := writeLayerTar(&buf, entries); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, readTar(t, &buf)); diff != "" {
				t.Errorf("layer tar (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLayerEntriesRejectsCollision(t *testing.T) {
	p := writeFile(t, t.TempDir(), "x", "x")
	_, err := layerEntries(map[string]string{"tmp": p}, Owner{})
	if err == nil || !strings.Contains(err.Error(), "two files named /tmp") {
		t.Fatalf("error = %v, want one naming /tmp twice", err)
	}
}

func TestLayerChangedFile(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "bin", "short")
	entries, err := layerEntries(map[string]string{"bin": p}, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "bin", "longer than before")
	if err := writeLayerTar(io.Discard, entries); err == nil || !strings.Contains(err.Error(), "changed size") {
		t.Fatalf("error = %v, want one saying the binary changed size", err)
	}
}

func TestConfigFile(t *testing.T) {
	for _, tc := range []struct {
		spec Spec
		want v1.Config
	}{
		{AgentSpec("v1.2.3"), v1.Config{Entrypoint: []string{"/annex-agent"}, User: "65532:65532", Env: []string{"PATH=/"}, WorkingDir: "/"}},
		{PauseSpec("v1.2.3"), v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535", Env: []string{"PATH=/"}, WorkingDir: "/"}},
		{EchoSpec("v1.2.3"), v1.Config{Entrypoint: []string{"/echo-server"}, User: "65532:65532", Env: []string{"PATH=/"}, WorkingDir: "/"}},
	} {
		t.Run(tc.spec.Repository, func(t *testing.T) {
			got := configFile(tc.spec, "arm64")
			want := &v1.ConfigFile{Architecture: "arm64", OS: "linux", Created: v1.Time{Time: Epoch}, Config: tc.want, RootFS: v1.RootFS{Type: "layers"}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewImage(t *testing.T) {
	dir := t.TempDir()
	spec := AgentSpec("v1.2.3")
	entries, err := layerEntries(map[string]string{
		"annex-agent":   writeFile(t, dir, "annex-agent", "agent"),
		"annex-gateway": writeFile(t, dir, "annex-gateway", "gateway"),
	}, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := newLayer(entries)
	if err != nil {
		t.Fatal(err)
	}
	img, err := newImage(spec, "amd64", l)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	diffID, _ := l.DiffID()
	want := configFile(spec, "amd64")
	want.RootFS.DiffIDs = []v1.Hash{diffID}
	want.History = []v1.History{{Created: v1.Time{Time: Epoch},
		CreatedBy: "github.com/annexhq/annex/internal/ociimage: /annex-agent from ./cmd/annex-agent, /annex-gateway from ./cmd/annex-gateway, /annex-fabric from ./cmd/annex-fabric",
		Comment:   "Annex v1.2.3"}}
	if diff := cmp.Diff(want, cf); diff != "" {
		t.Errorf("config file (-want +got):\n%s", diff)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	gotTypes := []types.MediaType{m.MediaType, m.Config.MediaType}
	for _, l := range m.Layers {
		gotTypes = append(gotTypes, l.MediaType)
	}
	if diff := cmp.Diff([]types.MediaType{types.OCIManifestSchema1, types.OCIConfigJSON, types.OCILayer}, gotTypes); diff != "" {
		t.Errorf("media types of manifest, config, layers (-want +got):\n%s", diff)
	}
	// The layer's DiffID is the sha256 of the tar it streams.
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close() //nolint:errcheck // test
	h, _, err := v1.SHA256(rc)
	if err != nil {
		t.Fatal(err)
	}
	if h != diffID {
		t.Errorf("DiffID %s, but the layer's tar hashes to %s", diffID, h)
	}
}

func TestSpecValidate(t *testing.T) {
	ok := PauseSpec("v1.0.0")
	for _, tc := range []struct {
		name   string
		mutate func(*Spec)
		want   string // substring of the error; empty: valid
	}{
		{"valid", func(*Spec) {}, ""},
		{"bad tag", func(s *Spec) { s.Tag = "has space" }, "not a valid name:tag"},
		{"no binaries", func(s *Spec) { s.Binaries = nil }, "no binaries"},
		{"absolute package", func(s *Spec) { s.Binaries[0].Package = "github.com/x/y" }, "relative to the module root"},
		{"path as name", func(s *Spec) { s.Binaries[0].Name = "bin/pause" }, "plain file name"},
		{"no version", func(s *Spec) { s.Version = "" }, "no version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			s.Binaries = append([]Binary(nil), ok.Binaries...)
			tc.mutate(&s)
			err := s.validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestBuildReproducible builds the pause image twice, by two builders into
// two files: the tarballs must be byte-identical. A third build into the
// first file finds it up to date and leaves it alone.
func TestBuildReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the pause binary")
	}
	ctx := context.Background()
	dir := t.TempDir()
	spec := PauseSpec("v1.2.3-test")
	var imgs []Image
	for _, name := range []string{"one.tar", "two.tar"} {
		b, err := NewBuilder(Options{})
		if err != nil {
			t.Fatal(err)
		}
		img, err := b.Build(ctx, spec, filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !img.Written {
			t.Fatalf("%s: Written = false for a new file", name)
		}
		imgs = append(imgs, img)
	}
	one, err := os.ReadFile(imgs[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	two, err := os.ReadFile(imgs[1].Path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(one, two) {
		t.Fatalf("two builds gave different tarballs (%d and %d bytes)", len(one), len(two))
	}
	imgs[1].Path = imgs[0].Path
	if diff := cmp.Diff(imgs[0], imgs[1]); diff != "" {
		t.Fatalf("two builds gave different images (-first +second):\n%s", diff)
	}
	if !strings.HasPrefix(imgs[0].Digest, "sha256:") || imgs[0].Ref != "annex.dev/pause:v1.2.3-test" {
		t.Fatalf("image = %+v, want annex.dev/pause:v1.2.3-test with a sha256 digest", imgs[0])
	}

	before, err := os.Stat(imgs[1].Path)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	b, err := NewBuilder(Options{Log: funcr.New(func(prefix, args string) { logs.WriteString(args + "\n") }, funcr.Options{Verbosity: 1})})
	if err != nil {
		t.Fatal(err)
	}
	same, err := b.Build(ctx, spec, imgs[1].Path)
	if err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(imgs[1].Path)
	if err != nil {
		t.Fatal(err)
	}
	if same.Written || !os.SameFile(before, after) {
		t.Fatalf("an up-to-date tarball was rewritten: %+v", same)
	}
	if strings.Contains(logs.String(), "built binary") {
		t.Fatalf("an up-to-date image was compiled again:\n%s", logs.String())
	}
	same.Path, same.Written = imgs[0].Path, true
	if diff := cmp.Diff(imgs[0], same); diff != "" {
		t.Fatalf("up-to-date image differs from the first build (-first +up-to-date):\n%s", diff)
	}

	other, err := Pause(ctx, imgs[1].Path) // this build's version, not v1.2.3-test
	if err != nil {
		t.Fatal(err)
	}
	if !other.Written || other.Digest == imgs[0].Digest {
		t.Fatalf("another version in the same file was not rewritten: %+v", other)
	}
}
