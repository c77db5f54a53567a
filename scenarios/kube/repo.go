package kube

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// FindRepo returns the project's source tree that contains dir or one of its parents: the directory with
// chart/Chart.yaml and manifests/pv.yaml. The backend installs that chart and creates objects from those
// manifests, so it runs from the source tree (make, go test) or is pointed at one.
func FindRepo(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if fileExists(filepath.Join(d, "chart", "Chart.yaml")) && fileExists(filepath.Join(d, "manifests", "pv.yaml")) {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no dummy-fuse-csi source tree (chart/Chart.yaml, manifests/pv.yaml) at or above %s", dir)
		}
		d = parent
	}
}

// ImageRef is the image the current build wrote: _output/images/dummy-fuse-csi.ref of `make image`.
func ImageRef(repo string) (string, error) {
	p := filepath.Join(repo, "_output", "images", "dummy-fuse-csi.ref")
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%s missing: run make image and load the image into the cluster, or name an image", p)
	}
	if err != nil {
		return "", err
	}
	ref := strings.TrimSpace(string(b))
	if ref == "" {
		return "", fmt.Errorf("%s is empty", p)
	}
	return ref, nil
}

// splitImage splits "name:tag" (the name may hold a registry port) into name and tag; no tag gives "".
func splitImage(ref string) (name, tag string) {
	slash := strings.LastIndex(ref, "/")
	if colon := strings.LastIndex(ref, ":"); colon > slash {
		return ref[:colon], ref[colon+1:]
	}
	return ref, ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
