package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"sigs.k8s.io/yaml"
)

// lockedWriter serialises lines of several goroutines into one log file.
type lockedWriter struct {
	mu sync.Mutex
	w  *os.File
}

func (l *lockedWriter) WriteLine(prefix string, line []byte) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.w == nil:
	case prefix == "":
		fmt.Fprintf(l.w, "%s\n", line)
	default:
		fmt.Fprintf(l.w, "%s %s\n", prefix, line)
	}
}

func (l *lockedWriter) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w == nil {
		return nil
	}
	err := l.w.Close()
	l.w = nil
	return err
}

// writeYAML writes v as YAML for the run's record; failures only cost the record.
func writeYAML(path string, v any) {
	b, err := yaml.Marshal(v)
	if err == nil {
		_ = os.WriteFile(path, b, 0o644)
	}
}

// stagingPath is kubelet's staging dir of a CSI volume: <root>/plugins/kubernetes.io/csi/<driver>/<sha256 of
// the volume handle>/globalmount (pkg/volume/csi makeDeviceMountPath).
func stagingPath(root, driver, handle string) string {
	sum := sha256.Sum256([]byte(handle))
	return filepath.Join(root, "plugins", "kubernetes.io", "csi", driver, hex.EncodeToString(sum[:]), "globalmount")
}

// minTime returns the earlier of a and b, ignoring zero times.
func minTime(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

// stampTime estimates when something happened that the API stamped with a second-resolution time t and that
// this process observed at seen: it happened in [t, t+1s) and before seen.
func stampTime(t, seen time.Time) time.Time {
	if t.IsZero() {
		return seen
	}
	return minTime(seen, t.Add(time.Second-time.Nanosecond))
}
