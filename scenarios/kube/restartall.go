package kube

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// restartAllRule is a container's restart policy and rule for scenarios.Container.RestartAllContainers: the
// rule needs a container-level restartPolicy (API validation), Always here, as the pod's.
func restartAllRule() (*corev1.ContainerRestartPolicy, []corev1.ContainerRestartRule) {
	always := corev1.ContainerRestartPolicyAlways
	return &always, []corev1.ContainerRestartRule{{
		Action: corev1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{
			Operator: corev1.ContainerRestartRuleOnExitCodesOpIn,
			Values:   []int32{scenarios.RestartAllExitCode},
		},
	}}
}

// usesRestartAll reports whether a scenario's pod has a RestartAllContainers rule.
func usesRestartAll(sc *scenarios.Scenario) bool {
	return slices.ContainsFunc(sc.Pod.Containers, func(c scenarios.Container) bool { return c.RestartAllContainers })
}

// checkRestartAllFeature refuses a scenario with a RestartAllContainers rule (a *scenarios.NotRunnableError)
// when the node's kubelet does not declare the feature (node.status.declaredFeatures): the gate is off there,
// or the kubelet predates it, and the rule would do nothing (or the API server would drop it).
func (b *Backend) checkRestartAllFeature(ctx context.Context) error {
	node, err := b.cs.CoreV1().Nodes().Get(ctx, b.node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("node %s, for its declared features: %w", b.node, err)
	}
	return restartAllRunnable(node)
}

// restartAllRunnable is checkRestartAllFeature's judgement of a node.
func restartAllRunnable(node *corev1.Node) error {
	if slices.Contains(node.Status.DeclaredFeatures, scenarios.RestartAllContainersFeature) {
		return nil
	}
	return &scenarios.NotRunnableError{
		Why: fmt.Sprintf("kubelet %s on node %s does not declare %s (node.status.declaredFeatures %v): the pod's RestartAllContainers rule would do nothing",
			node.Status.NodeInfo.KubeletVersion, node.Name, scenarios.RestartAllContainersFeature, node.Status.DeclaredFeatures),
		Fix: fmt.Sprintf("a cluster of Kubernetes %s or newer (the gate is on by default), or FEATURE_GATES=%s=true on v1.35 (alpha)",
			scenarios.RestartAllContainersIn, scenarios.RestartAllContainersFeature),
	}
}
