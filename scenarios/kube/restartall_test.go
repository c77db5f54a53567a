package kube

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// TestRestartAllRunnable: a node that declares the feature runs a RestartAllContainers scenario; one that does
// not makes it NOT RUNNABLE, saying how to make it runnable.
func TestRestartAllRunnable(t *testing.T) {
	node := &corev1.Node{}
	node.Name = "n1"
	node.Status.NodeInfo.KubeletVersion = "v1.35.4"
	node.Status.DeclaredFeatures = []string{"SomethingElse"}
	err := restartAllRunnable(node)
	var nr *scenarios.NotRunnableError
	if !errors.As(err, &nr) || !strings.Contains(nr.Why, "v1.35.4") || !strings.Contains(nr.Fix, scenarios.RestartAllContainersFeature) {
		t.Errorf("a node without the feature: %v, want NOT RUNNABLE naming the kubelet and the gate", err)
	}
	node.Status.DeclaredFeatures = append(node.Status.DeclaredFeatures, scenarios.RestartAllContainersFeature)
	if err := restartAllRunnable(node); err != nil {
		t.Errorf("a node that declares the feature: %v", err)
	}
}

// TestRemovedInstances: the status sequence kubelet publishes for a container RestartAllContainers removes
// (pkg/kubelet/kubelet_pods.go, convertToAPIContainerStatuses): kubelet's stand-in record (137, no container ID)
// with the restart count raised ends instance 0 while the container is not yet created again; instance 1 exists
// only once it runs; the stand-in stays in lastState.
func TestRemovedInstances(t *testing.T) {
	standIn := &corev1.ContainerStateTerminated{ExitCode: 137, Reason: restartingAllContainers,
		Message: "The container is removed because RestartAllContainers in place"}
	waiting := func(reason string) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}
	}
	removed := corev1.ContainerStatus{RestartCount: 1, State: waiting(restartingAllContainers),
		LastTerminationState: corev1.ContainerState{Terminated: standIn}}
	startFails := removed
	startFails.State = waiting("CreateContainerError")
	running := corev1.ContainerStatus{RestartCount: 1, ContainerID: "c1",
		State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		LastTerminationState: corev1.ContainerState{Terminated: standIn}}
	for _, cs := range []corev1.ContainerStatus{removed, startFails, running} {
		p := podWith(cs)
		info, ok := instanceOf(p, "reader", 0)
		if !ok || !info.previous || !info.removed || info.term != standIn {
			t.Errorf("%s: instance 0 = %+v (%t), want previous, removed, ended by the stand-in", stateText(cs.State), info, ok)
		}
		info, ok = instanceOf(p, "reader", 1)
		if want := cs.State.Running != nil; ok != want || (ok && (!info.current || info.id != "c1" || info.removed)) {
			t.Errorf("%s: instance 1 = %+v (%t), want it to exist (current, c1) iff it runs", stateText(cs.State), info, ok)
		}
	}
	// An ordinary exit keeps its container ID: not a removal.
	if removedForRestartAll(term("c0", 137, "Error")) || removedForRestartAll(nil) || !removedForRestartAll(standIn) {
		t.Error("removedForRestartAll: wrong for an ordinary exit, none, or the stand-in")
	}
}

// TestRemovedExit: a removed instance's exit is the code its workload logged, kubelet's stand-in code (137) only
// when it logged none; either way the reason says which.
func TestRemovedExit(t *testing.T) {
	standIn := &corev1.ContainerStateTerminated{ExitCode: 137, Reason: restartingAllContainers}
	one := 1
	if code, why := removedExit(standIn, &one); code != 1 || !strings.Contains(why, "workload's last line") {
		t.Errorf("logged 1: %d %q", code, why)
	}
	if code, why := removedExit(standIn, nil); code != 137 || !strings.Contains(why, "stand-in") {
		t.Errorf("nothing logged: %d %q", code, why)
	}
}

// TestParseCRILog: the CRI log file format, partial records joined, both streams kept, an odd record kept whole.
func TestParseCRILog(t *testing.T) {
	raw := "2026-11-26T19:46:26.410298131Z stdout F {\"event\":\"read\"}\n" +
		"2026-11-26T19:46:27.000000000Z stderr P part one, \n" +
		"2026-11-26T19:46:27.100000000Z stderr F part two\n" +
		"2026-11-26T19:46:28.000000000Z stdout F \n" +
		"not a record\n"
	got := parseCRILog([]byte(raw))
	want := []string{`{"event":"read"}`, "part one, part two", "", "not a record"}
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		if string(got[i].text) != w {
			t.Errorf("line %d: %q, want %q", i, got[i].text, w)
		}
	}
	if got[1].t.Second() != 27 || !got[3].t.IsZero() {
		t.Errorf("times: %v, %v; want a partial line at its first record's time, none for an odd record", got[1].t, got[3].t)
	}
	if p := removedLogPath("/var/log/pods", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u1"}}, "reader", 0); p != "/var/log/pods/ns_w_u1/reader/0.log" {
		t.Errorf("log path %q", p)
	}
}

// TestAwaitRemovedTermination: an instance whose container RestartAllContainers removed ends with kubelet's
// stand-in record, which has no container ID to match the instance's.
func TestAwaitRemovedTermination(t *testing.T) {
	b := &Backend{ctx: context.Background()}
	w := newPodWatch()
	standIn := &corev1.ContainerStateTerminated{ExitCode: 137, Reason: restartingAllContainers}
	p := podWith(corev1.ContainerStatus{RestartCount: 1,
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: restartingAllContainers}},
		LastTerminationState: corev1.ContainerState{Terminated: standIn}})
	p.UID = "u1"
	w.set(p, false)
	term, gone := b.awaitTermination(w, "u1", "reader", 0, "containerd://c0")
	if term != standIn || gone {
		t.Errorf("instance 0: %+v (gone %t), want the stand-in", term, gone)
	}
}
