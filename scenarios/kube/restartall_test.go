package kube

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

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
