package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DecodeManifests parses every YAML document in the files of fsys matching
// pattern, in file-name order, skipping empty documents.
func DecodeManifests(fsys fs.FS, pattern string) ([]*unstructured.Unstructured, error) {
	names, err := fs.Glob(fsys, pattern)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []*unstructured.Unstructured
	for _, n := range names {
		data, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		objs, err := DecodeYAML(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// DecodeYAML parses a multi-document YAML stream.
func DecodeYAML(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		out = append(out, u)
	}
}

// Apply server-side applies obj as annexctl, taking ownership of conflicting fields.
func Apply(ctx context.Context, c client.Client, obj *unstructured.Unstructured) error {
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply %s %s: %w", obj.GetKind(), objName(obj), err)
	}
	return nil
}

func objName(obj client.Object) string {
	if obj.GetNamespace() != "" {
		return obj.GetNamespace() + "/" + obj.GetName()
	}
	return obj.GetName()
}

// ApplyChanged server-side applies obj and reports whether the stored object
// changed (its resourceVersion moved), so commands can say "nothing changed".
func ApplyChanged(ctx context.Context, c client.Client, obj *unstructured.Unstructured) (bool, error) {
	before := &unstructured.Unstructured{}
	before.SetGroupVersionKind(obj.GroupVersionKind())
	rv := ""
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), before); err == nil {
		rv = before.GetResourceVersion()
	}
	applied := obj.DeepCopy()
	if err := Apply(ctx, c, applied); err != nil {
		return false, err
	}
	after := &unstructured.Unstructured{}
	after.SetGroupVersionKind(obj.GroupVersionKind())
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), after); err != nil {
		return false, err
	}
	return after.GetResourceVersion() != rv, nil
}

// ToUnstructured converts a typed object (TypeMeta set) for apply, dropping
// the fields an apply configuration must not carry.
func ToUnstructured(obj client.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "status")
	return u, nil
}

// ApplyTyped server-side applies a typed object and reports whether it changed.
func ApplyTyped(ctx context.Context, c client.Client, obj client.Object) (bool, error) {
	u, err := ToUnstructured(obj)
	if err != nil {
		return false, err
	}
	return ApplyChanged(ctx, c, u)
}
