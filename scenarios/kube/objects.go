package kube

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// scenarioLabel is the label of manifests/ pods that names the catalog scenario they reproduce.
const scenarioLabel = "dummy-fuse-csi/scenario"

// workloadLabel marks the run's workload pods: the one the backend creates, or those of its Deployment.
const workloadLabel = "dummy-fuse-csi/scenario-workload"

// manifests are the objects of manifests/ the backend starts from; it adjusts them to the scenario.
type manifests struct {
	pv   corev1.PersistentVolume
	pvc  corev1.PersistentVolumeClaim
	pods []corev1.Pod // every Pod manifest, sorted by file name
}

func loadManifests(dir string) (*manifests, error) {
	m := &manifests{}
	if err := decodeFile(filepath.Join(dir, "pv.yaml"), &m.pv); err != nil {
		return nil, err
	}
	if err := decodeFile(filepath.Join(dir, "pvc.yaml"), &m.pvc); err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var tm struct{ Kind string }
		if err := yaml.Unmarshal(b, &tm); err != nil || tm.Kind != "Pod" {
			continue
		}
		var p corev1.Pod
		if err := yaml.UnmarshalStrict(b, &p); err != nil {
			return nil, fmt.Errorf("decode %s: %w", f, err)
		}
		m.pods = append(m.pods, p)
	}
	if len(m.pods) == 0 {
		return nil, fmt.Errorf("no Pod manifest in %s", dir)
	}
	return m, nil
}

func decodeFile(path string, into any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if bytes.Count(b, []byte("\n---")) > 0 {
		return fmt.Errorf("%s: expected one object", path)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}

// podFor returns the manifest pod labelled with the scenario's name, else the one of its FUSE mode: the pod
// with the FUSE sidecar (pod-sidecar.yaml) in the sidecar mode, else the original demo's (pod.yaml, labelled
// "restart"); else the first.
func (m *manifests) podFor(sc *scenarios.Scenario) corev1.Pod {
	for _, p := range m.pods {
		if p.Labels[scenarioLabel] == sc.Name {
			return *p.DeepCopy()
		}
	}
	for _, p := range m.pods {
		if withSidecar := fuseSidecar(&p.Spec) >= 0; withSidecar == (sc.Pod.Sidecar != nil) &&
			(withSidecar || p.Labels[scenarioLabel] == "restart") {
			return *p.DeepCopy()
		}
	}
	return *m.pods[0].DeepCopy()
}

// fuseSidecar returns the index of the pod's FUSE sidecar among its init containers: a native sidecar
// (restartPolicy Always) that mounts the plugin's socket volume; -1 if there is none.
func fuseSidecar(spec *corev1.PodSpec) int {
	for i, c := range spec.InitContainers {
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			continue
		}
		for _, vm := range c.VolumeMounts {
			if vm.Name == contract.SidecarVolume {
				return i
			}
		}
	}
	return -1
}

// names of the run's objects.
type names struct {
	namespace, pv, pvc, pod, volumeHandle string
	// foreign: a driver-agnostic run (driver.go); ownPV: the run created the PV named pv (else a provisioner
	// did, or there is none) and deletes it.
	foreign, ownPV bool
}

// persistentVolume is pv.yaml for this run: its own name and volume handle (so that mount records and staging
// dirs of different runs never meet) and the run's driver. The claim names it (pvc.yaml's volumeName), as
// with manifests/.
func (m *manifests) persistentVolume(n names, driver string, labels map[string]string) *corev1.PersistentVolume {
	pv := m.pv.DeepCopy()
	pv.Name = n.pv
	pv.Labels = mergeLabels(pv.Labels, labels)
	if pv.Spec.CSI == nil {
		pv.Spec.CSI = &corev1.CSIPersistentVolumeSource{}
	}
	pv.Spec.CSI.Driver = driver
	pv.Spec.CSI.VolumeHandle = n.volumeHandle
	pv.Spec.ClaimRef = nil
	return pv
}

// writable makes a PV and its claim ReadWriteOnce instead of the manifests' ReadOnlyMany: a writable volume
// (Plugin.Writable), which kubelet then stages and publishes read-write (SINGLE_NODE_WRITER).
func writable(pv *corev1.PersistentVolume, pvc *corev1.PersistentVolumeClaim) {
	rwo := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	pv.Spec.AccessModes, pvc.Spec.AccessModes = rwo, rwo
}

func (m *manifests) claim(n names, labels map[string]string) *corev1.PersistentVolumeClaim {
	pvc := m.pvc.DeepCopy()
	pvc.Name, pvc.Namespace = n.pvc, n.namespace
	pvc.Labels = mergeLabels(pvc.Labels, labels)
	pvc.Spec.VolumeName = n.pv
	return pvc
}

// workloadPod is the scenario's pod: the manifest pod of the scenario with the catalog's containers (names,
// dummy-fuse-workload arguments with --log-format=json, mount path, subPath, propagation), restart policy and
// the image of this build; in the sidecar mode its FUSE sidecar runs the plugin's FUSE server, after what
// that server reads (server). The catalog is the truth; the manifest gives everything else (command, grace
// period, volume).
func (m *manifests) workloadPod(sc *scenarios.Scenario, n names, image string, interval time.Duration, labels map[string]string, server podServer) (*corev1.Pod, error) {
	base := m.podFor(sc)
	var vol, socketVol *corev1.Volume
	for i := range base.Spec.Volumes {
		switch v := &base.Spec.Volumes[i]; {
		case v.PersistentVolumeClaim != nil && vol == nil:
			vol = v
		case v.Name == contract.SidecarVolume:
			socketVol = v
		}
	}
	if vol == nil || len(base.Spec.Containers) == 0 {
		return nil, fmt.Errorf("manifest pod %s has no container or no PVC volume", base.Name)
	}
	vol.PersistentVolumeClaim.ClaimName = n.pvc
	var initCtrs []corev1.Container
	if sc.Pod.Sidecar != nil {
		i := fuseSidecar(&base.Spec)
		if i < 0 || socketVol == nil {
			return nil, fmt.Errorf("manifest pod %s has no FUSE sidecar (a native sidecar mounting the emptyDir %s)", base.Name, contract.SidecarVolume)
		}
		for _, c := range server.before {
			initCtrs = append(initCtrs, *c.DeepCopy())
		}
		side := sidecarContainer(base.Spec.InitContainers[i], *sc.Pod.Sidecar, n, image, server.args)
		side.VolumeMounts = append(side.VolumeMounts, server.mounts...)
		initCtrs = append(initCtrs, side)
	}
	pod := &corev1.Pod{
		TypeMeta:   base.TypeMeta,
		ObjectMeta: base.ObjectMeta,
		Spec:       base.Spec,
	}
	pod.Name, pod.Namespace = n.pod, n.namespace
	pod.Labels = mergeLabels(pod.Labels, labels)
	pod.Labels[scenarioLabel] = sc.Name
	pod.Labels[workloadLabel] = "true"
	pod.Spec.Volumes = []corev1.Volume{*vol}
	pod.Spec.InitContainers = initCtrs
	if initCtrs != nil {
		pod.Spec.Volumes = append(pod.Spec.Volumes, *socketVol)
		pod.Spec.Volumes = append(pod.Spec.Volumes, server.volumes...)
	}
	// The workload needs no DNS. A cluster without cluster DNS (the from-source one) would otherwise make
	// kubelet warn MissingClusterDNS at every sync, and its event spam filter (25 Warning events per pod,
	// then one per 5 minutes) would drop the "Failed" start-failure events the checks need.
	pod.Spec.DNSPolicy = corev1.DNSDefault
	pod.Spec.RestartPolicy = corev1.RestartPolicy(sc.Pod.RestartPolicy)
	if len(sc.Writers()) > 0 {
		// The run ends a writing pod by deleting it: its writers' last close may wait for a real server to serve again.
		grace := int64(scenarios.WriterGrace / time.Second)
		pod.Spec.TerminationGracePeriodSeconds = &grace
	}
	pod.Spec.Containers = nil
	for _, c := range sc.Pod.Containers {
		tmpl := base.Spec.Containers[0]
		for _, bc := range base.Spec.Containers {
			if bc.Name == c.Name {
				tmpl = bc
			}
		}
		ctr := *tmpl.DeepCopy()
		ctr.Name = c.Name
		ctr.Image = image
		ctr.ImagePullPolicy = corev1.PullIfNotPresent
		ctr.Args = c.WorkloadArgs(interval)
		prop := corev1.MountPropagationNone
		if c.Prop() == scenarios.PropagationHostToContainer {
			prop = corev1.MountPropagationHostToContainer
		}
		ctr.VolumeMounts = []corev1.VolumeMount{{
			Name: vol.Name, MountPath: c.Mount(), SubPath: c.SubPath, ReadOnly: !c.Write, MountPropagation: &prop,
		}}
		// The catalog's rule only: the template may be another row's pod (podFor's fallback).
		ctr.RestartPolicy, ctr.RestartPolicyRules = nil, nil
		if c.RestartAllContainers {
			ctr.RestartPolicy, ctr.RestartPolicyRules = restartAllRule()
		}
		pod.Spec.Containers = append(pod.Spec.Containers, ctr)
	}
	return pod, nil
}

// workloadDeployment is a Deployment of one replica of pod, for a scenario whose pod a controller owns
// (Scenario.Pod.Controller): deleting the pod makes its ReplicaSet create a new one.
func workloadDeployment(pod *corev1.Pod) *appsv1.Deployment {
	one := int32(1)
	sel := map[string]string{workloadLabel: "true"}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pod.Labels}, Spec: pod.Spec}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, Labels: pod.Labels},
		Spec:       appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: tmpl},
	}
}

// sidecarContainer is the manifest's FUSE sidecar for this run: the build's image, and `csi-plugin sidecar`
// with the scenario's flags, the socket of the run's volume (<socket volume mount>/<PV name>/socket) and the
// plugin's FUSE server flags (serverArgs).
func sidecarContainer(c corev1.Container, sc scenarios.Sidecar, n names, image string, serverArgs []string) corev1.Container {
	c = *c.DeepCopy()
	c.Image, c.ImagePullPolicy = image, corev1.PullIfNotPresent
	mount := "/" + contract.SidecarVolume
	for _, vm := range c.VolumeMounts {
		if vm.Name == contract.SidecarVolume {
			mount = vm.MountPath
		}
	}
	c.Args = append(sc.Args(path.Join(mount, n.pv, contract.SidecarSocket)), serverArgs...)
	return c
}

// probePod reads the volume's file through the host's volume and staging dirs (hostPath, HostToContainer, so
// that remounts reach it) every interval: the stat probe of the volume paths where the node's kubelet dir is
// not on this machine (kind).
func probePod(n names, image, nodeName, volumeDir, stagingDir string, interval time.Duration, labels map[string]string) *corev1.Pod {
	prop := corev1.MountPropagationHostToContainer
	dirType := corev1.HostPathDirectory
	var ctrs []corev1.Container
	var vols []corev1.Volume
	for _, p := range []struct{ name, dir string }{{scenarios.PathVolume, volumeDir}, {scenarios.PathStaging, stagingDir}} {
		// The parent of the mount point, so that the mount itself (and every later remount) reaches the probe.
		parent := filepath.Dir(p.dir)
		ctrs = append(ctrs, corev1.Container{
			Name:            p.name,
			Image:           image,
			ImagePullPolicy: corev1.PullIfNotPresent,
			Command:         []string{"/usr/local/bin/dummy-fuse-workload"},
			Args: []string{
				"--file=" + filepath.Join("/host", filepath.Base(p.dir), scenarios.FileName),
				"--keep-open=false", "--log-format=json", "--read-interval=" + interval.String(),
			},
			VolumeMounts: []corev1.VolumeMount{{Name: p.name, MountPath: "/host", ReadOnly: true, MountPropagation: &prop}},
		})
		vols = append(vols, corev1.Volume{Name: p.name, VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: parent, Type: &dirType},
		}})
	}
	grace := int64(1)
	return &corev1.Pod{
		TypeMeta:   typeMeta("Pod"),
		ObjectMeta: objectMeta(n.pod+"-probe", n.namespace, labels),
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			DNSPolicy:                     corev1.DNSDefault,
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    ctrs,
			Volumes:                       vols,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
}

func mergeLabels(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// containerOf parses an event's involvedObject.fieldPath "spec.containers{reader}" into "reader".
func containerOf(fieldPath string) string {
	const p = "spec.containers{"
	if strings.HasPrefix(fieldPath, p) && strings.HasSuffix(fieldPath, "}") {
		return fieldPath[len(p) : len(fieldPath)-1]
	}
	return ""
}
