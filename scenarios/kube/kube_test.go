package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
)

func TestErrnoIn(t *testing.T) {
	cases := map[string]string{
		`failed to stat "/v": stat /v: transport endpoint is not connected`:            "ENOTCONN",
		`lstat /x: no such file or directory`:                                          "ENOENT",
		`read /mnt/f: software caused connection abort`:                                "ECONNABORTED",
		`open /dev/x: no such device or address`:                                       "ENXIO", // not ENODEV, a prefix of it
		`failed to prepare subPath for volumeMount "dummy-fuse" of container "reader"`: "",
		`permission denied, then transport endpoint is not connected`:                  "ENOTCONN", // the last cause wins
	}
	for msg, want := range cases {
		if got := errnoIn(msg); got != want {
			t.Errorf("errnoIn(%q) = %q, want %q", msg, got, want)
		}
	}
}

func TestTiming(t *testing.T) {
	tm := New(Options{Repo: "/nonexistent", Image: "x:y"}).Timing()
	if tm.BackoffBase != 10*time.Second || tm.BackoffMax != 5*time.Minute || tm.ReadInterval != time.Second {
		t.Errorf("timing %+v, want kubelet's 10s/5m back-off and a 1s read interval", tm)
	}
}

func term(id string, code int32, reason string) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{ContainerID: id, ExitCode: code, Reason: reason}
}

func podWith(cs corev1.ContainerStatus) *corev1.Pod {
	cs.Name = "reader"
	return &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{cs}}}
}

func TestInstanceOf(t *testing.T) {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	backoff := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerError"}}
	creating := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	cases := []struct {
		name   string
		cs     corev1.ContainerStatus
		n      int
		ok     bool
		want   string // current, previous, lost
		termID string
	}{
		{"not started", corev1.ContainerStatus{State: creating}, 0, false, "", ""},
		{"running", corev1.ContainerStatus{State: running, ContainerID: "c0"}, 0, true, "current", ""},
		{"next not yet", corev1.ContainerStatus{State: running, ContainerID: "c0"}, 1, false, "", ""},
		// Exited and failing to start again: restart count stays, the exit is in lastState.
		{"exited, start fails", corev1.ContainerStatus{State: backoff, ContainerID: "c0",
			LastTerminationState: corev1.ContainerState{Terminated: term("c0", 1, "Error")}}, 0, true, "current", "c0"},
		{"exited, start fails, next", corev1.ContainerStatus{State: backoff, ContainerID: "c0",
			LastTerminationState: corev1.ContainerState{Terminated: term("c0", 1, "Error")}}, 1, false, "", ""},
		{"restarted: previous", corev1.ContainerStatus{State: running, RestartCount: 1, ContainerID: "c1",
			LastTerminationState: corev1.ContainerState{Terminated: term("c0", 1, "Error")}}, 0, true, "previous", "c0"},
		{"restarted: current", corev1.ContainerStatus{State: running, RestartCount: 1, ContainerID: "c1",
			LastTerminationState: corev1.ContainerState{Terminated: term("c0", 1, "Error")}}, 1, true, "current", ""},
		{"two restarts later", corev1.ContainerStatus{State: running, RestartCount: 3, ContainerID: "c3"}, 1, true, "lost", ""},
	}
	for _, tc := range cases {
		info, ok := instanceOf(podWith(tc.cs), "reader", tc.n)
		if ok != tc.ok {
			t.Errorf("%s: exists %t, want %t", tc.name, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		got := map[bool]string{true: "current"}[info.current] + map[bool]string{true: "previous"}[info.previous] + map[bool]string{true: "lost"}[info.lost]
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		if id := ""; info.term != nil {
			id = info.term.ContainerID
			if id != tc.termID {
				t.Errorf("%s: termination of %q, want %q", tc.name, id, tc.termID)
			}
		} else if tc.termID != "" {
			t.Errorf("%s: no termination, want %q's", tc.name, tc.termID)
		}
	}
}

// TestSidecarInstances: a native sidecar's restarts are in initContainerStatuses, and its instances are found
// there like a container's.
func TestSidecarInstances(t *testing.T) {
	p := &corev1.Pod{Status: corev1.PodStatus{
		ContainerStatuses: []corev1.ContainerStatus{{Name: "reader", ContainerID: "r0",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
		InitContainerStatuses: []corev1.ContainerStatus{{Name: "dummy-fuse-sidecar", ContainerID: "s1", RestartCount: 1,
			State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			LastTerminationState: corev1.ContainerState{Terminated: term("s0", 137, "Error")}}},
	}}
	if info, ok := instanceOf(p, "dummy-fuse-sidecar", 0); !ok || !info.previous || info.term == nil || info.term.ExitCode != 137 {
		t.Errorf("the killed sidecar instance: %+v, %t", info, ok)
	}
	if info, ok := instanceOf(p, "dummy-fuse-sidecar", 1); !ok || !info.current || info.id != "s1" {
		t.Errorf("the restarted sidecar instance: %+v, %t", info, ok)
	}
	if terminationOf(p, "dummy-fuse-sidecar", "s0") == nil || !stillRunning(p, "dummy-fuse-sidecar", "s1") {
		t.Error("the sidecar's termination and its running instance are not found")
	}
}

func TestStartFailed(t *testing.T) {
	if !startFailed(term("c", 128, "StartError")) || startFailed(term("c", 1, "Error")) || startFailed(nil) {
		t.Error("only runc's StartError/ContainerCannotRun terminations are failed starts")
	}
}

func TestWorkloadPod(t *testing.T) {
	_, m := repoManifests(t)
	n := runNames("restart")
	if !strings.HasPrefix(n.namespace, "dfc-restart-") || n.pv != n.namespace || n.volumeHandle != n.namespace {
		t.Errorf("run names %+v", n)
	}
	for _, sc := range catalog.All() {
		p, err := m.workloadPod(&sc, n, "dummy-fuse-csi:test", time.Second, map[string]string{managedByLabel: managedBy}, podServer{})
		if err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		if p.Labels[scenarioLabel] != sc.Name || p.Labels[managedByLabel] != managedBy || p.Namespace != n.namespace {
			t.Errorf("%s: labels %v, namespace %s", sc.Name, p.Labels, p.Namespace)
		}
		if string(p.Spec.RestartPolicy) != string(sc.Pod.RestartPolicy) || p.Spec.DNSPolicy != corev1.DNSDefault {
			t.Errorf("%s: restartPolicy %s, dnsPolicy %s", sc.Name, p.Spec.RestartPolicy, p.Spec.DNSPolicy)
		}
		if g := p.Spec.TerminationGracePeriodSeconds; len(sc.Writers()) > 0 && (g == nil || *g != int64(scenarios.WriterGrace/time.Second)) {
			t.Errorf("%s: a writing pod's grace %v, want the writers' %s: deleting it is how the run stops them", sc.Name, g, scenarios.WriterGrace)
		}
		wantVolumes := 1
		if sc.Pod.Sidecar != nil {
			wantVolumes = 2
			checkSidecar(t, &sc, p, n)
		} else if len(p.Spec.InitContainers) != 0 {
			t.Errorf("%s: init containers %+v, want none", sc.Name, p.Spec.InitContainers)
		}
		if len(p.Spec.Volumes) != wantVolumes || p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != n.pvc {
			t.Errorf("%s: volumes %+v", sc.Name, p.Spec.Volumes)
		}
		if len(p.Spec.Containers) != len(sc.Pod.Containers) {
			t.Fatalf("%s: %d containers, want %d", sc.Name, len(p.Spec.Containers), len(sc.Pod.Containers))
		}
		for i, c := range sc.Pod.Containers {
			pc := p.Spec.Containers[i]
			if pc.Name != c.Name || pc.Image != "dummy-fuse-csi:test" || pc.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("%s: container %s image %s", sc.Name, pc.Name, pc.Image)
			}
			if !slices.Equal(pc.Args, c.WorkloadArgs(time.Second)) || !slices.Contains(pc.Args, "--log-format=json") {
				t.Errorf("%s/%s: args %q", sc.Name, c.Name, pc.Args)
			}
			if len(pc.Command) == 0 || !strings.HasSuffix(pc.Command[0], "dummy-fuse-workload") {
				t.Errorf("%s/%s: command %q from the manifest", sc.Name, c.Name, pc.Command)
			}
			hasRule := len(pc.RestartPolicyRules) == 1 && pc.RestartPolicyRules[0].Action == corev1.ContainerRestartRuleActionRestartAllContainers &&
				pc.RestartPolicy != nil && *pc.RestartPolicy == corev1.ContainerRestartPolicyAlways &&
				slices.Equal(pc.RestartPolicyRules[0].ExitCodes.Values, []int32{scenarios.RestartAllExitCode})
			if hasRule != c.RestartAllContainers || (!hasRule && (pc.RestartPolicy != nil || len(pc.RestartPolicyRules) != 0)) {
				t.Errorf("%s/%s: restartPolicy %v, rules %+v; want the RestartAllContainers rule: %t", sc.Name, c.Name, pc.RestartPolicy, pc.RestartPolicyRules, c.RestartAllContainers)
			}
			vm := pc.VolumeMounts
			if len(vm) != 1 || vm[0].MountPath != c.Mount() || vm[0].SubPath != c.SubPath || vm[0].ReadOnly != !c.Write ||
				string(*vm[0].MountPropagation) != string(c.Prop()) || vm[0].Name != p.Spec.Volumes[0].Name {
				t.Errorf("%s/%s: volume mounts %+v", sc.Name, c.Name, vm)
			}
		}
	}
	pv := m.persistentVolume(n, "drv", nil)
	if pv.Name != n.pv || pv.Spec.CSI.Driver != "drv" || pv.Spec.CSI.VolumeHandle != n.volumeHandle || pv.Spec.ClaimRef != nil {
		t.Errorf("PV %+v", pv)
	}
	c := m.claim(n, nil)
	if c.Spec.VolumeName != n.pv || c.Namespace != n.namespace {
		t.Errorf("PVC %+v", c)
	}
	if !slices.Equal(pv.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany}) || !slices.Equal(c.Spec.AccessModes, pv.Spec.AccessModes) {
		t.Errorf("the manifests' volume: access modes %v and %v, want ReadOnlyMany", pv.Spec.AccessModes, c.Spec.AccessModes)
	}
	writable(pv, c)
	if rwo := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}; !slices.Equal(pv.Spec.AccessModes, rwo) || !slices.Equal(c.Spec.AccessModes, rwo) {
		t.Errorf("a writable volume: access modes %v and %v, want ReadWriteOnce", pv.Spec.AccessModes, c.Spec.AccessModes)
	}
}

// checkSidecar checks the FUSE sidecar of a sidecar-mode scenario's pod: the native sidecar of the manifest
// with the build's image, the scenario's delay and the socket of the run's volume in the socket volume.
func checkSidecar(t *testing.T, sc *scenarios.Scenario, p *corev1.Pod, n names) {
	t.Helper()
	i := fuseSidecar(&p.Spec)
	if i < 0 || len(p.Spec.InitContainers) != 1 {
		t.Fatalf("%s: init containers %+v, want the FUSE sidecar", sc.Name, p.Spec.InitContainers)
	}
	c := p.Spec.InitContainers[i]
	wantArgs := sc.Pod.Sidecar.Args("/dfc-sidecar/" + n.pv + "/socket")
	if c.Image != "dummy-fuse-csi:test" || !slices.Equal(c.Args, wantArgs) || c.SecurityContext == nil || c.SecurityContext.RunAsNonRoot == nil || !*c.SecurityContext.RunAsNonRoot {
		t.Errorf("%s: sidecar %s image %s args %q security %+v, want args %q, non-root", sc.Name, c.Name, c.Image, c.Args, c.SecurityContext, wantArgs)
	}
	if v := p.Spec.Volumes[len(p.Spec.Volumes)-1]; v.Name != "dfc-sidecar" || v.EmptyDir == nil {
		t.Errorf("%s: the socket volume is %+v", sc.Name, v)
	}
}

func TestParseKubeletLine(t *testing.T) {
	raw := `E1122 04:56:41.569265   16370 kubelet_pods.go:361] "Failed to prepare subPath for volumeMount of the container" ` +
		`err="error checking path /var/lib/kubelet/pods/2f95/volume-subpaths/pv/reader/0 for mount: lstat /var/lib/kubelet/pods/2f95/volume-subpaths/pv/reader/0: transport endpoint is not connected" ` +
		`containerName="reader" volumeMountName="dummy-fuse"`
	now := time.Date(2026, 11, 22, 5, 0, 0, 0, time.Local)
	l := parseKubeletLine(raw, now)
	if l.level != 'E' || l.container != "reader" || !strings.HasPrefix(l.err, "error checking path") || errnoIn(l.err) != "ENOTCONN" {
		t.Errorf("parsed %+v", l)
	}
	if want := time.Date(2026, 11, 22, 4, 56, 41, 569265000, time.Local); !l.t.Equal(want) {
		t.Errorf("time %s, want %s", l.t, want)
	}
	quoted := parseKubeletLine(`E1122 04:56:41.000000 1 x.go:1] "m" err="a \"b\" c" containerName="x"`, now)
	if quoted.err != `a "b" c` {
		t.Errorf("unquoted err %q", quoted.err)
	}
}

func TestKindKubeletLogCommand(t *testing.T) {
	if c := kindKubeletLogCommand("kind://nonexistent-cli-xyz/c/n"); c != nil {
		t.Errorf("a provider CLI that is not in $PATH gives %q", c)
	}
	if c := kindKubeletLogCommand(""); c != nil {
		t.Errorf("a node that is not kind's gives %q", c)
	}
	if c := kindKubeletLogCommand("kind://sh/dummy-fuse-csi/dummy-fuse-csi-control-plane"); !slices.Equal(c[:3], []string{"sh", "exec", "dummy-fuse-csi-control-plane"}) {
		t.Errorf("command %q", c)
	}
}

func TestTimes(t *testing.T) {
	seen := time.Date(2026, 1, 1, 0, 0, 10, 500e6, time.UTC)
	if got := stampTime(time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC), seen); !got.Equal(seen) {
		t.Errorf("a stamp in the same second as the observation: %s", got)
	}
	if got := stampTime(time.Date(2026, 1, 1, 0, 0, 5, 0, time.UTC), seen); got.Sub(time.Date(2026, 1, 1, 0, 0, 5, 0, time.UTC)) >= time.Second {
		t.Errorf("an old stamp: %s, want within its second", got)
	}
	ts, line := splitTimestamp([]byte(`2026-11-22T04:51:29.752182123Z I1122 04:51:29.752182 1 server.go:158] "Ready"`))
	if ts.Nanosecond() != 752182123 || !strings.HasPrefix(string(line), "I1122") {
		t.Errorf("split %s %q", ts, line)
	}
	if klogMessage(line) != `"Ready"` {
		t.Errorf("klog message %q", klogMessage(line))
	}
}

func TestSplitImage(t *testing.T) {
	for ref, want := range map[string][2]string{
		"dummy-fuse-csi:0.1.0":       {"dummy-fuse-csi", "0.1.0"},
		"host:5000/x/dummy-fuse-csi": {"host:5000/x/dummy-fuse-csi", ""},
		"host:5000/x:v1":             {"host:5000/x", "v1"},
	} {
		if n, tag := splitImage(ref); n != want[0] || tag != want[1] {
			t.Errorf("splitImage(%q) = %q, %q", ref, n, tag)
		}
	}
}

// TestEvents checks how the workload pod's Events become evidence: count increments are occurrences,
// "Failed" is a start failure with the errno from kubelet's message, other pods' events are not evidence.
func TestEvents(t *testing.T) {
	b := New(Options{Repo: "/nonexistent", Image: "x:y"})
	b.n = names{namespace: "ns", pod: "workload"}
	b.rec = &scenarios.Recorder{}
	b.workload = newPodWatch()
	b.workload.set(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "workload", UID: "u-workload"}}, false)
	at := metav1.NewTime(time.Now().Add(-time.Minute))
	ev := func(uid, reason, msg, pod string, count int32) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{UID: types.UID("e-" + uid)}, Reason: reason, Message: msg, Count: count,
			Type: corev1.EventTypeWarning, LastTimestamp: at,
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: pod, UID: types.UID("u-" + pod), FieldPath: "spec.containers{reader}"}}
	}
	stat := `Error: failed to generate container "x" spec: failed to generate spec: failed to stat "/v": stat /v: transport endpoint is not connected`
	b.onEvent(ev("1", "Failed", stat, "workload", 1))
	b.onEvent(ev("1", "Failed", stat, "workload", 1)) // a resync: no new occurrence
	b.onEvent(ev("1", "Failed", "(combined from similar events): "+stat, "workload", 3))
	b.onEvent(ev("2", "BackOff", "Back-off restarting failed container reader", "workload", 1))
	b.onEvent(ev("3", "Failed", stat, "other-pod", 1))
	b.onEvent(ev("4", "Pulled", "already present", "workload", 1))
	// The remediator's event on the pod it deleted, arriving after the successor was taken up, is still the
	// run's; kubelet's container events on that earlier pod are not.
	b.pod.uidSet["u-earlier"] = true
	b.onEvent(ev("5", "Failed", stat, "earlier", 1))
	b.onEvent(ev("6", contract.ReasonDeleted, "Deleting the pod", "earlier", 1))
	e := b.rec.Snapshot()
	var kinds []string
	for _, x := range e.Events {
		kinds = append(kinds, string(x.Kind))
		if x.Kind == scenarios.KStartFailed && (x.Errno != "ENOTCONN" || x.Container != "reader" || !strings.HasPrefix(x.Message, "Error: failed")) {
			t.Errorf("start failure %+v", x)
		}
		if !x.Time.Equal(at.Add(time.Second - time.Nanosecond)) {
			t.Errorf("event time %s, want within the stamp's second", x.Time)
		}
	}
	if want := []string{"start_failed", "start_failed", "start_failed", "back_off", "pod_event"}; !slices.Equal(kinds, want) {
		t.Errorf("kinds %v, want %v", kinds, want)
	}
}

// TestReadKubeletVersion: the run is judged for the kubelet of the pod's node, as the node reports it.
func TestReadKubeletVersion(t *testing.T) {
	node := func(name, version string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: version}}}
	}
	cs := fake.NewClientset(node("old", "v1.36.3"), node("new", "v1.37.2-gke.100"), node("odd", "unknown"))
	for name, want := range map[string]string{"old": "v1.36.3", "new": "v1.37.2-gke.100", "odd": "", "gone": ""} {
		b := &Backend{cs: cs, node: name, rec: &scenarios.Recorder{}}
		err := b.readKubeletVersion(t.Context())
		got := b.rec.Snapshot().Kubelet
		if want == "" {
			if err == nil || got.Known() {
				t.Errorf("node %s: kubelet %s, error %v; want an error", name, got, err)
			}
			continue
		}
		if err != nil || got.String() != want {
			t.Errorf("node %s: kubelet %s, error %v; want %s", name, got, err, want)
		}
	}
}

func TestRestartBackoffMax(t *testing.T) {
	for raw, want := range map[string]struct {
		max time.Duration
		set bool
	}{
		`{"kubeletconfig":{"crashLoopBackOff":{"maxContainerRestartPeriod":"5m0s"}}}`: {5 * time.Minute, true},
		`{"kubeletconfig":{"crashLoopBackOff":{"maxContainerRestartPeriod":"30s"}}}`:  {30 * time.Second, true},
		`{"kubeletconfig":{"cgroupDriver":"cgroupfs"}}`:                               {0, false},
	} {
		limit, set, err := restartBackoffMax([]byte(raw))
		if err != nil || limit != want.max || set != want.set {
			t.Errorf("%s: %s %t %v, want %s %t", raw, limit, set, err, want.max, want.set)
		}
	}
	if _, _, err := restartBackoffMax([]byte("<html>")); err == nil {
		t.Error("a non-JSON answer must be an error")
	}
}

// TestUnstageWatchReset: after the pod component's deletion was unstaged, the teardown waits for another
// NodeUnstageVolume, the new pod's.
func TestUnstageWatchReset(t *testing.T) {
	u := newUnstageWatch()
	unstage := func(id string) {
		u.observe("plugin#0", "[ID:"+id+"] GRPC call: /csi.v1.Node/NodeUnstageVolume", "vol")
		u.observe("plugin#0", "[ID:"+id+`] GRPC request: {"volume_id":"vol"}`, "vol")
		u.observe("plugin#0", "[ID:"+id+"] GRPC response: {}", "vol")
	}
	unstage("1")
	if err := u.wait(context.Background(), time.Second); err != nil {
		t.Fatalf("the first unstage: %v", err)
	}
	u.reset()
	if err := u.wait(context.Background(), 50*time.Millisecond); err == nil {
		t.Fatal("after reset, the old unstage still counts")
	}
	unstage("2")
	if err := u.wait(context.Background(), time.Second); err != nil {
		t.Fatalf("the second unstage: %v", err)
	}
}

// TestUnstageWatchStaged: only a volume whose NodeStageVolume succeeded is waited for at teardown; a run whose
// pod the API server refused never staged it (a v1.35 API server refused a RestartAllContainers rule, and the
// teardown waited two minutes for an unstage that could not come, then called the node unclean).
func TestUnstageWatchStaged(t *testing.T) {
	u := newUnstageWatch()
	u.observe("plugin#0", "[ID:1] GRPC call: /csi.v1.Node/NodeStageVolume", "vol")
	u.observe("plugin#0", `[ID:1] GRPC request: {"volume_id":"other"}`, "vol")
	u.observe("plugin#0", "[ID:1] GRPC response: {}", "vol")
	if u.stagedSeen() {
		t.Fatal("another volume's stage counted as the run's")
	}
	u.observe("plugin#0", "[ID:2] GRPC call: /csi.v1.Node/NodeStageVolume", "vol")
	u.observe("plugin#0", `[ID:2] GRPC request: {"volume_id":"vol"}`, "vol")
	if u.stagedSeen() {
		t.Fatal("a stage without its response counted")
	}
	u.observe("plugin#0", "[ID:2] GRPC response: {}", "vol")
	if !u.stagedSeen() {
		t.Fatal("the run's volume's stage was not seen")
	}
	u.reset()
	if u.stagedSeen() {
		t.Fatal("after an unstage and reset, the old stage still counts")
	}
}

// TestRefusedRuleIsNotRunnable: the API server's refusal of a RestartAllContainers rule at the pod's creation
// makes the run NOT RUNNABLE, with the nodes' kubelet recorded (so that a v1.35 refusal is foretold by the row's
// needs); any other refusal, or one of a row without the rule, stays the error it is.
func TestRefusedRuleIsNotRunnable(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vm"}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.35.4"}}}
	withRule := &scenarios.Scenario{Pod: scenarios.Pod{Containers: []scenarios.Container{{Name: "reader", RestartAllContainers: true}}}}
	refusal := apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "workload", field.ErrorList{field.NotSupported(
		field.NewPath("spec", "containers").Index(0).Child("restartPolicyRules").Index(0).Child("action"), "RestartAllContainers", []string{"Restart"})})
	b := &Backend{cs: fake.NewClientset(node), sc: withRule, rec: &scenarios.Recorder{}}
	err := b.refusedRule(t.Context(), fmt.Errorf("create pod: %w", refusal))
	var nr *scenarios.NotRunnableError
	if !errors.As(err, &nr) {
		t.Fatalf("refusedRule = %v, want NOT RUNNABLE", err)
	}
	if got := b.rec.Snapshot().Kubelet; got.String() != "v1.35.4" {
		t.Errorf("kubelet recorded %q, want v1.35.4", got)
	}
	other := apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "workload", field.ErrorList{field.Required(field.NewPath("spec"), "x")})
	if err := b.refusedRule(t.Context(), other); errors.As(err, &nr) {
		t.Errorf("another refusal became NOT RUNNABLE: %v", err)
	}
	b.sc = &scenarios.Scenario{Pod: scenarios.Pod{Containers: []scenarios.Container{{Name: "reader"}}}}
	if err := b.refusedRule(t.Context(), refusal); errors.As(err, &nr) {
		t.Errorf("a row without the rule: %v became NOT RUNNABLE", err)
	}
}

// TestOnWorkloadPod: the workload watch follows a bare pod's successor (the pod the backend creates after
// deleting it, same name, new UID), and a controller's new pod only once the current one is going; a deletion
// the backend did not ask for is recorded as the pod's kill, once.
func TestOnWorkloadPod(t *testing.T) {
	pod := func(uid string, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "workload", UID: types.UID(uid)}}
		if deleting {
			now := metav1.Now()
			p.DeletionTimestamp = &now
		}
		return p
	}
	current := func(b *Backend) string {
		p, _, _ := b.workload.get()
		return string(p.UID)
	}
	kills := func(b *Backend) int {
		return b.rec.Count(func(e scenarios.Event) bool { return e.Kind == scenarios.KKilled })
	}

	bare := &Backend{sc: &scenarios.Scenario{}, workload: newPodWatch(), rec: &scenarios.Recorder{}}
	bare.onWorkloadPod(pod("a", false), false)
	bare.pod.deleting.Store(true) // the pod component's kill: the backend deletes it
	bare.onWorkloadPod(pod("a", true), false)
	bare.onWorkloadPod(pod("a", true), true)
	bare.onWorkloadPod(pod("b", false), false)
	if got := current(bare); got != "b" {
		t.Errorf("bare pod: the watch holds pod %q after the new pod b, want b", got)
	}
	if n := kills(bare); n != 0 {
		t.Errorf("bare pod deleted by the backend: %d kills recorded by the watch, want 0 (the step records it)", n)
	}

	ctl := &Backend{sc: &scenarios.Scenario{Pod: scenarios.Pod{Controller: "ReplicaSet"}}, workload: newPodWatch(), rec: &scenarios.Recorder{}}
	ctl.onWorkloadPod(pod("a", false), false)
	ctl.onWorkloadPod(pod("x", false), false) // another pod of the label while a runs: not ours to follow
	if got := current(ctl); got != "a" {
		t.Errorf("controller: the watch holds pod %q, want a (the current pod is not going)", got)
	}
	ctl.onWorkloadPod(pod("a", true), false) // the remediator's deletion begins
	ctl.onWorkloadPod(pod("a", true), false)
	if n := kills(ctl); n != 1 {
		t.Errorf("a deletion not by the run: %d kills recorded, want 1", n)
	}
}

// TestServerSettings: the settings of the server as its container's arguments give them, for one flag only.
func TestServerSettings(t *testing.T) {
	args := []string{"--fuse-mode=relay", "--fuse-server-opt=endpoint=http://127.0.0.1:4443/storage/v1/", "--fuse-server-opt=url=http://h/?a=b",
		"--relay-server-opt=endpoint=other", "--fuse-server-opt=bad"}
	got := serverSettings(args, "--fuse-server-opt=")
	want := map[string]string{"endpoint": "http://127.0.0.1:4443/storage/v1/", "url": "http://h/?a=b"}
	if !maps.Equal(got, want) {
		t.Errorf("serverSettings = %v, want %v", got, want)
	}
}
