package kube

import (
	"os"
	"time"

	"sigs.k8s.io/yaml"
)

// writeYAML writes v as YAML for the run's record; failures only cost the record.
func writeYAML(path string, v any) {
	b, err := yaml.Marshal(v)
	if err == nil {
		_ = os.WriteFile(path, b, 0o644)
	}
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
