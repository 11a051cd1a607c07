package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
)

// copyStages copies kwok's stage configurations out of the module cache.
func copyStages(dst string) error {
	// The marker's name changes whenever the selection of stages does, so
	// that an older copy is replaced.
	marker := filepath.Join(dst, ".complete-v2")
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	out, err := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/kwok@"+kwokVersion).Output()
	if err != nil {
		return fmt.Errorf("download kwok module: %w", err)
	}
	modDir, err := jsonField(out, "Dir")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, s := range kwokStages {
		err := filepath.WalkDir(filepath.Join(modDir, s), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || filepath.Ext(p) != ".yaml" || d.Name() == "kustomization.yaml" {
				return nil
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(modDir, p)
			name := filepath.Join(dst, filepath.Base(filepath.Dir(rel))+"-"+filepath.Base(rel))
			return os.WriteFile(name, data, 0o644)
		})
		if err != nil {
			return fmt.Errorf("copy kwok stages %s: %w", s, err)
		}
	}
	return os.WriteFile(marker, nil, 0o644)
}
