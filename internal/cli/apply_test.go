package cli

import (
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeManifests(t *testing.T) {
	fsys := fstest.MapFS{
		"b.yaml": {Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n")},
		"a.yaml": {Data: []byte("# comment only\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: a1\n---\n\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: a2\n")},
		"c.txt":  {Data: []byte("not yaml: [")},
	}
	objs, err := DecodeManifests(fsys, "*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	if diff := cmp.Diff([]string{"Namespace/a1", "Namespace/a2", "ConfigMap/b"}, got); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	if _, err := DecodeManifests(fstest.MapFS{"bad.yaml": {Data: []byte("a: [")}}, "*.yaml"); err == nil {
		t.Error("broken YAML decoded without error")
	}
}
