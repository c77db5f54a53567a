package kube

// Volume health as kubelet reports it (Scenario.VolumeHealth): its VolumeConditionAbnormal events up to v1.36
// (events.go hands them here) and the workload pod's status.volumeHealth since v1.37, as evidence; and a check
// that the node's kubelet runs with what the scenario assumes.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// podEventSource is the source of the workload pod's events that the scenarios' health checks read, by reason:
// kubelet's volume condition event and the remediator's decisions.
func podEventSource(reason string) (scenarios.Source, bool) {
	switch reason {
	case scenarios.ReasonVolumeConditionAbnormal:
		return scenarios.SrcKubelet, true
	case contract.ReasonDeleted, contract.ReasonLeftAlone:
		return scenarios.SrcRemediator, true
	}
	return "", false
}

// observeVolumeHealth records a change of the workload pod's status.volumeHealth for its volume: kubelet
// v1.37's volume health manager writes it from NodeGetVolumeHealth.
func (b *Backend) observeVolumeHealth(p *corev1.Pod) {
	name := claimVolume(p, b.n.pvc)
	var conds []string
	for _, vh := range p.Status.VolumeHealth {
		if vh.Name != name {
			continue
		}
		for _, c := range vh.HealthConditions {
			conds = append(conds, fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message))
		}
	}
	s := strings.Join(conds, "; ")
	b.mu.Lock()
	if b.pod.volumeHealth == nil {
		b.pod.volumeHealth = map[string]string{}
	}
	prev, seen := b.pod.volumeHealth[string(p.UID)]
	b.pod.volumeHealth[string(p.UID)] = s
	b.mu.Unlock()
	if prev == s && (seen || s == "") {
		return
	}
	b.logf("pod %s (%s): status.volumeHealth[%s] = %q", p.Name, shortUID(string(p.UID)), name, s)
	b.rec.Add(scenarios.Event{Time: time.Now(), Source: scenarios.SrcKubelet, Kind: scenarios.KVolumeHealth, Message: s})
}

// claimVolume is the name of the volume of p that mounts claim.
func claimVolume(p *corev1.Pod, claim string) string {
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			return v.Name
		}
	}
	return ""
}

// checkVolumeHealthConfig refuses a VolumeHealth scenario (a *scenarios.NotRunnableError) when the node's
// kubelet does not run as it assumes: the CSIVolumeHealth gate on, and volumeStatsAggPeriod
// scenarios.HealthPeriod. Such a kubelet reports late or never, and the scenario would fail for the cluster's
// sake. Best effort, like readRestartBackoffMax: an unreadable config is assumed right.
func (b *Backend) checkVolumeHealthConfig(ctx context.Context) error {
	raw, err := b.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", b.node, "proxy", "configz").DoRaw(ctx)
	if err != nil {
		b.logf("kubelet config of node %s not readable (%v): assuming the CSIVolumeHealth gate and volumeStatsAggPeriod %s", b.node, err, scenarios.HealthPeriod)
		return nil
	}
	gate, period, err := volumeHealthConfig(raw)
	if err != nil {
		b.logf("kubelet config of node %s: %v", b.node, err)
		return nil
	}
	return volumeHealthRunnable(b.node, gate, period)
}

// volumeHealthRunnable is checkVolumeHealthConfig's judgement of a kubelet's gate and period.
func volumeHealthRunnable(node string, gate bool, period time.Duration) error {
	if gate && period == scenarios.HealthPeriod {
		return nil
	}
	return &scenarios.NotRunnableError{
		Why: fmt.Sprintf("kubelet on node %s runs with CSIVolumeHealth=%t and volumeStatsAggPeriod %s; this scenario needs the gate and %s",
			node, gate, period, scenarios.HealthPeriod),
		Fix: fmt.Sprintf("make cluster-down && make cluster-up (its defaults: FEATURE_GATES=CSIVolumeHealth=true VOLUME_STATS_AGG_PERIOD=%s); "+
			"on kind, a cluster from manifests/kind-config.yaml", scenarios.HealthPeriod),
	}
}

// volumeHealthConfig reads the CSIVolumeHealth gate and volumeStatsAggPeriod from kubelet's /configz answer
// (the period defaults to 1m when unset).
func volumeHealthConfig(configz []byte) (gate bool, period time.Duration, err error) {
	var c struct {
		KubeletConfig struct {
			FeatureGates         map[string]bool  `json:"featureGates"`
			VolumeStatsAggPeriod *metav1.Duration `json:"volumeStatsAggPeriod"`
		} `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(configz, &c); err != nil {
		return false, 0, fmt.Errorf("parse /configz: %w", err)
	}
	period = time.Minute
	if d := c.KubeletConfig.VolumeStatsAggPeriod; d != nil {
		period = d.Duration
	}
	return c.KubeletConfig.FeatureGates["CSIVolumeHealth"], period, nil
}

const remediatorContainer = "remediator"

// onRemediatorPod follows the remediator pods' logs (Plugin.Remediation) into remediator.log: its decisions with
// their evidence. Its events on the workload pod are the evidence the checks read (events.go).
func (b *Backend) onRemediatorPod(p *corev1.Pod, deleted bool) {
	rp, seen := b.observeDSPod(b.remediators, p, deleted)
	if seen || b.logs.remediator == nil {
		return
	}
	b.wg.Add(1)
	go b.follow(rp.w, remediatorContainer, true, instanceHandler{
		line: func(n int, _ instanceInfo, line []byte, ts time.Time) {
			writePodLine(b.logs.remediator, rp.name, n, line, ts)
		},
		end: func(int, instanceInfo, *corev1.ContainerStateTerminated, bool) {},
	})
}
