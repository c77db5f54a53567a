package scenarios

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

// KubeletVersion is the version of the kubelet a scenario ran on, as the node reports it
// (Node.status.nodeInfo.kubeletVersion, e.g. "v1.37.2" or a vendor's "v1.36.3-eks-1a2b3c"). The zero value
// means unknown. Comparisons use the numeric major.minor.patch only (apimachinery's generic version): a
// vendor suffix or a pre-release does not change which expectations apply.
type KubeletVersion struct {
	raw string
	v   *version.Version
}

// ParseKubeletVersion parses "v1.37.2", "1.37.2", "v1.37" or a version with a suffix ("v1.36.3-eks-1a2b3c").
func ParseKubeletVersion(s string) (KubeletVersion, error) {
	s = strings.TrimSpace(s)
	v, err := version.ParseGeneric(s)
	if err != nil {
		return KubeletVersion{}, fmt.Errorf("kubelet version %q: %w", s, err)
	}
	if !strings.HasPrefix(s, "v") {
		s = "v" + s
	}
	return KubeletVersion{raw: s, v: v}, nil
}

// MustKubeletVersion is ParseKubeletVersion for versions written in the catalog; it panics on a typo.
func MustKubeletVersion(s string) KubeletVersion {
	v, err := ParseKubeletVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

// Known reports whether the version is set.
func (v KubeletVersion) Known() bool { return v.v != nil }

// String is the version as reported ("v1.37.2"), or "unknown".
func (v KubeletVersion) String() string {
	if !v.Known() {
		return "unknown"
	}
	return v.raw
}

// MinorString is "v<major>.<minor>" ("v1.37"), or "unknown".
func (v KubeletVersion) MinorString() string {
	if !v.Known() {
		return "unknown"
	}
	return fmt.Sprintf("v%d.%d", v.v.Major(), v.v.Minor())
}

// AtLeast reports whether v ≥ min (numerically); false when either is unknown.
func (v KubeletVersion) AtLeast(min KubeletVersion) bool {
	return v.Known() && min.Known() && v.v.AtLeast(min.v)
}

// Equal reports whether v and o are the same numeric version.
func (v KubeletVersion) Equal(o KubeletVersion) bool {
	return v.Known() && o.Known() && v.v.EqualTo(o.v)
}

// MarshalText writes the version as reported (events.json).
func (v KubeletVersion) MarshalText() ([]byte, error) {
	if !v.Known() {
		return nil, nil
	}
	return []byte(v.raw), nil
}

// UnmarshalText parses what MarshalText wrote; empty is unknown.
func (v *KubeletVersion) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*v = KubeletVersion{}
		return nil
	}
	p, err := ParseKubeletVersion(string(b))
	if err != nil {
		return err
	}
	*v = p
	return nil
}

// KubeletRange is a range of kubelet versions, From ≤ v < Before; an unset bound is open, and the zero range
// holds every version. An expectation with a range applies only to runs on a kubelet in it.
type KubeletRange struct {
	From, Before KubeletVersion
}

// KubeletBefore is the range of kubelets older than v (e.g. KubeletBefore("v1.37"): up to every v1.36.x).
func KubeletBefore(v string) KubeletRange { return KubeletRange{Before: MustKubeletVersion(v)} }

// KubeletSince is the range of kubelets at v or newer.
func KubeletSince(v string) KubeletRange { return KubeletRange{From: MustKubeletVersion(v)} }

// All reports whether the range holds every version (no bound).
func (r KubeletRange) All() bool { return !r.From.Known() && !r.Before.Known() }

// Contains reports whether v is in the range. An unknown version is only in the range of all versions.
func (r KubeletRange) Contains(v KubeletVersion) bool {
	if r.All() {
		return true
	}
	if !v.Known() {
		return false
	}
	if r.From.Known() && !v.AtLeast(r.From) {
		return false
	}
	if r.Before.Known() && v.AtLeast(r.Before) {
		return false
	}
	return true
}

// String says the range in words: "kubelet < v1.37", "kubelet ≥ v1.37", "kubelet v1.35 to < v1.37", "any kubelet".
func (r KubeletRange) String() string {
	switch {
	case r.All():
		return "any kubelet"
	case !r.Before.Known():
		return "kubelet ≥ " + r.From.String()
	case !r.From.Known():
		return "kubelet < " + r.Before.String()
	}
	return fmt.Sprintf("kubelet %s to < %s", r.From, r.Before)
}

func (r KubeletRange) validate() error {
	if r.From.Known() && r.Before.Known() && r.From.AtLeast(r.Before) {
		return fmt.Errorf("empty kubelet range %s", r)
	}
	return nil
}

// SubPathFixedIn is the first kubelet release whose subPath preparation recovers from a dead FUSE bind:
// prepareSubpathTarget in pkg/volume/util/subpath/subpath_linux.go unmounts a corrupted bind (mount-utils
// IsCorruptedMnt: ENOTCONN, ESTALE, EIO, …) and binds the subPath again (kubernetes PR #138856), and lazily
// unmounts a bind whose inode differs from the source (PR #139275); both merged in May 2026 and first released
// in v1.37 (v1.36.3 does not have them).
const SubPathFixedIn = "v1.37"

// RestartAllContainersIn is the first kubelet that honours a container restart rule with the action
// RestartAllContainers by default (KEP-5532; the RestartAllContainersOnContainerExits gate, beta and on since
// v1.36, alpha and off in v1.35: pkg/features/kube_features.go). On such a rule's exit kubelet kills every
// other container of the pod at once (grace period 0), removes them all and starts them again in the same
// sandbox, without back-off (they have no status left), keeping the pod's UID, IP and volumes: the volumes are
// not published again (pkg/kubelet/kuberuntime/kuberuntime_manager.go, ContainersToReset). A node whose kubelet
// has it lists it in node.status.declaredFeatures.
const RestartAllContainersIn = "v1.36"

// RestartAllContainersFeature is the name of the feature in node.status.declaredFeatures (and of its gate).
const RestartAllContainersFeature = "RestartAllContainersOnContainerExits"

// Need is a kubelet feature a scenario cannot run without, and the first release that has it on by default: on
// an older kubelet the row is NOT RUNNABLE, as expected (an earlier release may have it behind a gate).
type Need struct {
	Feature string         // as node.status.declaredFeatures names it
	From    KubeletVersion // the first release that has it by default
}

func (n Need) String() string { return n.Feature + " (kubelet " + n.From.MinorString() + "+)" }

// Needs returns what the scenario needs of the kubelet beyond what every release the catalog runs on has: a pod
// with a RestartAllContainers rule needs the feature that honours it.
func (s *Scenario) Needs() []Need {
	var out []Need
	if slices.ContainsFunc(s.Pod.Containers, func(c Container) bool { return c.RestartAllContainers }) {
		out = append(out, Need{Feature: RestartAllContainersFeature, From: MustKubeletVersion(RestartAllContainersIn)})
	}
	return out
}

// NotRunnableExpected reports whether the outcome is NOT RUNNABLE as the scenario's needs foretell: the kubelet
// it ran on is older than the first release of something the scenario needs. A pass that runs such a row there
// did not expect it to run; one NOT RUNNABLE on a release that has what it needs (a gate turned off) did.
func (o *Outcome) NotRunnableExpected() bool {
	return o.NotRunnable() != nil && o.Scenario.Predates(o.Kubelet)
}

// Predates reports whether kubelet release v is older than the first release of something the scenario needs
// (false when v is unknown): a refusal there is what its needs foretell.
func (s *Scenario) Predates(v KubeletVersion) bool {
	return v.Known() && slices.ContainsFunc(s.Needs(), func(n Need) bool { return !v.AtLeast(n.From) })
}
