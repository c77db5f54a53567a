package local

import (
	"fmt"
	"strings"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// KubeletVersions are the kubelet versions the local backend models, newest first: the kubelet code it
// reproduces (subpath.go) was read in these releases, and its verdicts are meant to equal theirs. The first one
// is the default. Between them only the subPath preparation differs (see subpath.go); the restart back-off
// (10 s doubling to 5 min, KubeletCrashLoopBackOffMax's default) and subPath cleanup are the same.
var KubeletVersions = []string{"v1.37.2", "v1.36.3"}

// ModelledKubelet returns the modelled kubelet version s names: one of KubeletVersions, or its minor ("v1.36");
// "" is the default (the newest).
func ModelledKubelet(s string) (scenarios.KubeletVersion, error) {
	if s == "" {
		s = KubeletVersions[0]
	}
	want, err := scenarios.ParseKubeletVersion(s)
	if err != nil {
		return scenarios.KubeletVersion{}, err
	}
	minorOnly := strings.Count(strings.TrimPrefix(s, "v"), ".") == 1
	for _, m := range KubeletVersions {
		v := scenarios.MustKubeletVersion(m)
		if v.Equal(want) || (minorOnly && v.MinorString() == want.MinorString()) {
			return v, nil
		}
	}
	return scenarios.KubeletVersion{}, fmt.Errorf("the local backend does not model kubelet %s (it models %s)", s,
		strings.Join(KubeletVersions, ", "))
}
