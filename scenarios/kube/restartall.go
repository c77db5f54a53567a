package kube

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	if err := restartAllRunnable(node); err != nil {
		return err
	}
	b.podLogsDir = defaultPodLogsDir
	raw, err := b.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", b.node, "proxy", "configz").DoRaw(ctx)
	if err != nil {
		b.logf("kubelet config of node %s not readable (%v): assuming podLogsDir %s", b.node, err, b.podLogsDir)
		return nil
	}
	var c struct {
		KubeletConfig struct {
			PodLogsDir string `json:"podLogsDir"`
		} `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		b.logf("kubelet config of node %s: parse /configz: %v", b.node, err)
	} else if c.KubeletConfig.PodLogsDir != "" {
		b.podLogsDir = c.KubeletConfig.PodLogsDir
	}
	return nil
}

// refusedRule turns the API server's refusal of a pod with a RestartAllContainers rule into NOT RUNNABLE: an API
// server without the feature enabled (v1.35, where it is alpha and off) rejects the action as an unsupported
// value when the pod is created, before any node runs it, so checkRestartAllFeature never gets to see the node.
// The nodes' kubelet version is recorded (when they agree), so that the verdict can tell whether the row's
// needs foretold the refusal. Any other error is returned as it is.
func (b *Backend) refusedRule(ctx context.Context, err error) error {
	if !usesRestartAll(b.sc) || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), string(corev1.ContainerRestartRuleActionRestartAllContainers)) {
		return err
	}
	if nodes, lerr := b.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); lerr == nil {
		if v, ok := oneKubeletVersion(nodes.Items); ok {
			b.rec.SetKubelet(v)
		}
	}
	return &scenarios.NotRunnableError{
		Why: fmt.Sprintf("the API server refuses the pod's RestartAllContainers rule (%v): the feature is off in this cluster", err),
		Fix: fmt.Sprintf("a cluster of Kubernetes %s or newer (the gate is on by default), or FEATURE_GATES=%s=true on v1.35 (alpha)",
			scenarios.RestartAllContainersIn, scenarios.RestartAllContainersFeature),
	}
}

// oneKubeletVersion is the kubelet version every node reports, if they agree.
func oneKubeletVersion(nodes []corev1.Node) (scenarios.KubeletVersion, bool) {
	var v scenarios.KubeletVersion
	for i, n := range nodes {
		nv, err := scenarios.ParseKubeletVersion(n.Status.NodeInfo.KubeletVersion)
		if err != nil || (i > 0 && !nv.Equal(v)) {
			return scenarios.KubeletVersion{}, false
		}
		v = nv
	}
	return v, len(nodes) > 0
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

// restartingAllContainers is the reason kubelet gives the record it makes up for a container that
// RestartAllContainers removed (pkg/kubelet/kubelet_pods.go, RestartingAllContainers).
const restartingAllContainers = "RestartingAllContainers"

// removedForRestartAll reports whether t is kubelet's stand-in for a container instance RestartAllContainers
// removed: kubelet kills the pod's other containers, removes every container (keeping their log files) and
// starts them again in the same sandbox. A removed container has no status left, so kubelet's status
// (convertToAPIContainerStatuses) says it terminated with 137, reason RestartingAllContainers, without a
// container ID, start or finish time, and counts a restart; the instance's own exit may never be published.
func removedForRestartAll(t *corev1.ContainerStateTerminated) bool {
	return t != nil && t.ContainerID == "" && t.Reason == restartingAllContainers
}

// removedExit is the exit code and reason recorded for an instance RestartAllContainers removed: kubelet's
// stand-in says 137 whatever the process returned, so the code the workload said in its own last line is
// taken when it logged one.
func removedExit(term *corev1.ContainerStateTerminated, logged *int) (int, string) {
	if logged == nil {
		return int(term.ExitCode), term.Reason + " (kubelet's stand-in code: the container was removed, its own exit is unknown)"
	}
	return *logged, fmt.Sprintf("%s (the code from the workload's last line: kubelet removed the container and reports %d)", term.Reason, term.ExitCode)
}

// defaultPodLogsDir is kubelet's podLogsDir unless its config says otherwise; nodeLogDir is the node directory
// kubelet serves at /logs/ (pkg/kubelet/kubelet.go, nodeLogDir).
const (
	defaultPodLogsDir = "/var/log/pods"
	nodeLogDir        = "/var/log"
)

// removedLogPath is instance n's log file on the node, as kubelet names it
// (<podLogsDir>/<namespace>_<pod>_<uid>/<container>/<restart count>.log, pkg/kubelet/kuberuntime/helpers.go).
func removedLogPath(podLogsDir string, p *corev1.Pod, container string, n int) string {
	return filepath.Join(podLogsDir, fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID), container, fmt.Sprintf("%d.log", n))
}

// readNodeLog reads a log file of the node: through kubelet's /logs/ handler (via the API server's node proxy)
// when it lies under nodeLogDir; otherwise only where this machine is the node (the from-source cluster, whose
// kubelet keeps pod logs in its own directory), from the file itself.
func (b *Backend) readNodeLog(node, path string) ([]byte, string, error) {
	if rel, err := filepath.Rel(nodeLogDir, path); err == nil && !strings.HasPrefix(rel, "..") {
		raw, err := b.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "logs", rel).DoRaw(b.ctx)
		return raw, "kubelet's /logs/ on node " + node, err
	}
	if !b.local {
		return nil, "", fmt.Errorf("outside kubelet's /logs/ (%s), and the node is not this machine", nodeLogDir)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	return raw, "this machine (the node)", nil
}

// readRemovedLog delivers the lines after the first skip of the log of instance n, which RestartAllContainers
// removed: `kubectl logs --previous` finds no container to read, but kubelet keeps the removed containers' log
// files until the pod is deleted (SyncPod's removeContainer(…, keepLogs=true), pkg/kubelet/kuberuntime/
// kuberuntime_manager.go), and serves the node's /var/log at /logs/ (enableSystemLogHandler, on by default), which
// the API server proxies. It returns how many lines the log has been delivered in all.
func (b *Backend) readRemovedLog(p *corev1.Pod, container string, n int, info instanceInfo, skip int, timestamps bool, h instanceHandler) int {
	path := removedLogPath(cmp.Or(b.podLogsDir, defaultPodLogsDir), p, container, n)
	raw, from, err := b.readNodeLog(p.Spec.NodeName, path)
	if err != nil {
		b.logf("logs %s %s#%d: the container was removed (RestartAllContainers), and its file %s: %v", p.Name, container, n, path, err)
		return skip
	}
	lines := parseCRILog(raw)
	b.logf("logs %s %s#%d: the container was removed (RestartAllContainers): read its file %s from %s (%d lines, %d read before)",
		p.Name, container, n, path, from, len(lines), skip)
	for i := skip; i < len(lines); i++ {
		var ts time.Time
		if timestamps {
			ts = lines[i].t
		}
		h.line(n, info, lines[i].text, ts)
	}
	return max(skip, len(lines))
}

// criLine is one line of a container log file in the CRI format.
type criLine struct {
	t    time.Time
	text []byte
}

// parseCRILog parses a container log file in the CRI format ("<RFC3339Nano time> <stream> <P|F> <text>", one
// record a line; P marks a partial line that the next record continues), both streams merged as `kubectl logs`
// does. A record it cannot parse is taken whole as a line.
func parseCRILog(raw []byte) []criLine {
	var out []criLine
	var partial *criLine
	for _, rec := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
		if rec == "" {
			continue
		}
		f := strings.SplitN(rec, " ", 4)
		t, err := time.Parse(time.RFC3339Nano, f[0])
		if len(f) < 3 || err != nil || (f[2] != "P" && f[2] != "F") {
			out = append(out, criLine{text: []byte(rec)})
			continue
		}
		text := ""
		if len(f) == 4 {
			text = f[3]
		}
		if partial == nil {
			partial = &criLine{t: t}
		}
		partial.text = append(partial.text, text...)
		if f[2] == "F" {
			out = append(out, *partial)
			partial = nil
		}
	}
	if partial != nil {
		out = append(out, *partial)
	}
	return out
}
