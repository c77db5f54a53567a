package remediate

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/restore"
)

// subPathFixed is the first kubelet that re-creates a subPath bind whose source mount was replaced
// (pkg/volume/util/subpath/subpath_linux.go prepareSubpathTarget; kubernetes PRs #138856 and #139275).
var subPathFixed = version.MustParseGeneric("1.37.0")

// volumeState is what the remediator knows about one of the plugin's targets in a pod.
type volumeState struct {
	VolumeID string
	// Key names the volume across pods: its driver ("" for the plugin's own) and ID.
	Key    string
	Target string
	// PodVolumes are the names of the pod's volumes this target backs (the containers refer to those).
	PodVolumes []string
	// MountedAt is when the plugin made the target's current mount (its publish record's time).
	MountedAt time.Time
	// ReboundInside says that the setns strategy's pass after that mount replaced every dead copy it found in
	// running containers (the record's Reattached): those containers have the new mount.
	ReboundInside bool
	// Problem is the plugin's answer to NodeGetVolumeHealth when the target is not healthy now ("" when it is).
	Problem string
	// UnhealthySince is when this remediator first saw the target unhealthy without a healthy answer since.
	UnhealthySince time.Time
	// DeletedFor is when this remediator last deleted a pod because this volume was dead, with no healthy
	// answer for it since; zero when it did not.
	DeletedFor time.Time
}

// deletionDidNotHeal says why deleting pod would not heal it ("" when it may): one of its volumes is dead, and
// the pod got that volume after the remediator had deleted a pod for the same dead volume. Kubelet keeps a
// volume staged while any pod on the node uses it, so a driver that hands new pods the dead staging mount
// (k8s-csi-s3 v0.43.7: its NodePublishVolume binds the staging mount whose check fails with ENOTCONN, its
// issue #179) gives every successor the dead volume, and deleting them would only churn pods.
func deletionDidNotHeal(pod *corev1.Pod, vols []volumeState) string {
	for _, v := range vols {
		// The API keeps creation times to the second: a successor made within the second of the deletion may
		// show a time up to a second earlier.
		if v.Problem != "" && !v.DeletedFor.IsZero() && !pod.CreationTimestamp.Time.Before(v.DeletedFor.Add(-time.Second)) {
			return fmt.Sprintf("a pod was deleted at %s for the dead volume %s, and this pod, created after it (%s), got the volume dead too: "+
				"the driver hands new pods the dead mount (its staging mount on this node is likely dead, and kubelet keeps it while a pod uses the volume), so deleting pods does not heal it",
				stamp(v.DeletedFor), v.VolumeID, stamp(pod.CreationTimestamp.Time))
		}
	}
	return ""
}

// finding is one reason why nothing will heal a pod: the evidence, and when its condition began (the grace
// period counts from there).
type finding struct {
	Since time.Time
	Why   string
}

// findings returns why the volumes of pod will not heal on their own, from the evidence alone:
//   - a target that is unhealthy now: kubelet mounts a volume once per pod and never again while it runs (unless
//     the CSIDriver asks for republishing, which the grace period leaves time for);
//   - a container that started before the plugin re-mounted the target (a repair after its FUSE server died)
//     still holds the dead mount in its mount namespace; only with the stack strategy and mount propagation
//     HostToContainer or Bidirectional does the new mount reach it, or when the setns strategy's pass re-bound
//     every dead copy inside the running containers (one it could not re-bind still counts);
//   - a container with a subPath of a re-mounted volume on a kubelet older than v1.37, which re-uses the subPath
//     bind of the dead mount for every restart of the container (not while the setns pass's re-bind of the
//     container's own copy keeps it running).
//
// kubelet is the node's kubelet version, nil when unknown (the subPath rule then does not apply).
func findings(pod *corev1.Pod, vols []volumeState, kubelet *version.Version, strategy restore.Strategy) []finding {
	var out []finding
	statuses := map[string]corev1.ContainerStatus{}
	for _, s := range pod.Status.ContainerStatuses {
		statuses[s.Name] = s
	}
	oldKubelet := kubelet != nil && kubelet.LessThan(subPathFixed)
	for _, v := range vols {
		if v.Problem != "" {
			out = append(out, finding{Since: v.UnhealthySince, Why: fmt.Sprintf("volume %s at %s is unhealthy since %s: %s",
				v.VolumeID, v.Target, stamp(v.UnhealthySince), v.Problem)})
			continue
		}
		for _, c := range pod.Spec.Containers {
			st, ok := statuses[c.Name]
			if !ok {
				continue
			}
			for _, m := range c.VolumeMounts {
				if !slices.Contains(v.PodVolumes, m.Name) {
					continue
				}
				running := st.State.Running
				propagates := m.MountPropagation != nil && (*m.MountPropagation == corev1.MountPropagationHostToContainer || *m.MountPropagation == corev1.MountPropagationBidirectional)
				reached := strategy == restore.Stack && propagates || v.ReboundInside
				if running != nil && startedBefore(running.StartedAt.Time, v.MountedAt) && !reached {
					out = append(out, finding{Since: v.MountedAt, Why: fmt.Sprintf("container %s (started %s) still holds the mount of volume %s that the plugin replaced at %s after its FUSE server died",
						c.Name, stamp(running.StartedAt.Time), v.VolumeID, stamp(v.MountedAt))})
				}
				// A running container that setns re-bound reads; kubelet's own subPath bind on the host stays dead
				// (setns touches only the pod's containers), so the rule holds again once it restarts.
				reboundRunning := v.ReboundInside && running != nil && startedBefore(running.StartedAt.Time, v.MountedAt)
				if (m.SubPath != "" || m.SubPathExpr != "") && oldKubelet && !reboundRunning {
					if first := earliestStart(st); !first.IsZero() && startedBefore(first, v.MountedAt) {
						out = append(out, finding{Since: v.MountedAt, Why: fmt.Sprintf("container %s mounts a subPath of volume %s, whose mount the plugin replaced at %s after the container first started (%s): kubelet %s re-uses the dead subPath bind (fixed in v1.37)",
							c.Name, v.VolumeID, stamp(v.MountedAt), stamp(first), kubelet)})
					}
				}
			}
		}
	}
	return out
}

// startedBefore says whether a container whose status says it started at started surely started before t: the
// API keeps start times to the second (RFC 3339), so it may have started up to a second later.
func startedBefore(started, t time.Time) bool { return !started.Add(time.Second).After(t) }

// olderContainer says whether a container of pod started (its earliest start that its status shows) before a
// mount made at t: only then can a container rule of findings apply to that mount, and only then does the
// remediator need to know which of the pod's volumes the mount is (which may take reading claims).
func olderContainer(pod *corev1.Pod, t time.Time) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if first := earliestStart(s); !first.IsZero() && startedBefore(first, t) {
			return true
		}
	}
	return false
}

// earliestStart is the earliest start of container s that its status still shows (this run or the last one).
func earliestStart(s corev1.ContainerStatus) time.Time {
	var t time.Time
	for _, st := range []corev1.ContainerState{s.State, s.LastTerminationState} {
		var at metav1.Time
		switch {
		case st.Running != nil:
			at = st.Running.StartedAt
		case st.Terminated != nil:
			at = st.Terminated.StartedAt
		}
		if !at.IsZero() && (t.IsZero() || at.Time.Before(t)) {
			t = at.Time
		}
	}
	return t
}

// recreatingOwners are the controllers that create a new pod when one of theirs is deleted, by kind, with the
// resource the remediator reads each as.
var recreatingOwners = map[string]schema.GroupVersionResource{
	"ReplicaSet":  {Group: "apps", Version: "v1", Resource: "replicasets"},
	"StatefulSet": {Group: "apps", Version: "v1", Resource: "statefulsets"},
	"DaemonSet":   {Group: "apps", Version: "v1", Resource: "daemonsets"},
	"Job":         {Group: "batch", Version: "v1", Resource: "jobs"},
}

// ownerName names the pod's controller as its reference does, for the log.
func ownerName(pod *corev1.Pod) string {
	if ref := metav1.GetControllerOf(pod); ref != nil {
		return ref.Kind + "/" + ref.Name
	}
	return "none"
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	return t.UTC().Format(time.RFC3339)
}
