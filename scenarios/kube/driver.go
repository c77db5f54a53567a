package kube

// Bring your own driver: the driver-agnostic rows (catalog.Drivers) against any CSI driver installed in the
// cluster. Nothing of the driver's internals is used: its volume comes from a StorageClass, a static PV file
// or inline volume attributes, and its node plugin is found as the DaemonSet pod on the workload's node whose
// containers name the driver (driverdiscover.go).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// DriverTarget is the foreign CSI driver a driver-agnostic run measures, and how to get a volume of it.
type DriverTarget struct {
	// Name is the CSIDriver's name.
	Name string
	// Exactly one of: StorageClass (a claim of that class, provisioned by the driver), PVFile (a static
	// PersistentVolume of the driver, YAML; the run creates it under a name of its own), VolumeAttributes (an
	// inline CSI volume of the pod with these attributes; the CSIDriver must allow the Ephemeral mode).
	StorageClass     string
	PVFile           string
	VolumeAttributes map[string]string
	// ReadPath is the file the workload reads, relative to the volume's root; empty: the first regular file of
	// the volume in lexical order, found on the node (findReadPath).
	ReadPath string
	// PluginSelector is a label selector for the node plugin pod, when its containers do not name the driver.
	PluginSelector string
	// FuseProcess is the name (comm) of the process that driver-process-kill kills in the node plugin pod.
	FuseProcess string
	// Placement is where the driver keeps its FUSE servers, as the operator says it (only recorded).
	Placement string
	// MountPodSelector is a label selector for the pod that driver-mount-pod-delete deletes on the node.
	MountPodSelector string
}

// Validate checks the target's flags without a cluster.
func (t DriverTarget) Validate() error {
	if t.Name == "" {
		return errors.New("--driver: the CSIDriver's name is required")
	}
	sources := 0
	for _, set := range []bool{t.StorageClass != "", t.PVFile != "", len(t.VolumeAttributes) > 0} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		return errors.New("--driver needs exactly one of --storage-class, --pv and --volume-attributes (where the volume comes from)")
	}
	if p := path.Clean(t.ReadPath); t.ReadPath != "" && (path.IsAbs(t.ReadPath) || p == "." || p == ".." || strings.HasPrefix(p, "../")) {
		return fmt.Errorf("--read-path %q: must be a file path relative to the volume's root, inside it", t.ReadPath)
	}
	for flag, sel := range map[string]string{"--plugin-selector": t.PluginSelector, "--mount-pod-selector": t.MountPodSelector} {
		if sel == "" {
			continue
		}
		if _, err := labels.Parse(sel); err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
	}
	if strings.ContainsAny(t.FuseProcess, "/ ") || len(t.FuseProcess) > 15 {
		return fmt.Errorf("--fuse-process %q: a process name as /proc/PID/comm has it (at most 15 characters, no / or space)", t.FuseProcess)
	}
	return nil
}

// Runnable says why row cannot run against t ("" when it can): the process and mount-pod rows need their flag.
func (t DriverTarget) Runnable(row string) string {
	switch {
	case row == catalog.DriverProcessKill && t.FuseProcess == "":
		return row + " needs --fuse-process=NAME (the process in the node plugin pod to kill)"
	case row == catalog.DriverMountPod && t.MountPodSelector == "":
		return row + " needs --mount-pod-selector=SELECTOR (the driver's mount pod on the node)"
	}
	return ""
}

// ParseAttributes parses --volume-attributes: k=v pairs separated by commas.
func ParseAttributes(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("key %q given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

// setupDriver is Setup for a driver-agnostic row: the run's namespace, the driver's volume, the workload pod.
func (b *Backend) setupDriver(ctx context.Context, sc *scenarios.Scenario, env *scenarios.Env) error {
	t := b.opts.Driver
	if err := t.Validate(); err != nil {
		return err
	}
	if why := t.Runnable(sc.Name); why != "" {
		return errors.New(why)
	}
	var err error
	if b.parts, err = topology.Build("kube", sc.Plugin.Topology(), driverKinds, func(c topology.Component) (part, error) {
		return &driverPart{b: b, c: c}, nil
	}); err != nil {
		return err
	}
	if b.man, err = loadManifests(filepath.Join(b.opts.Repo, "manifests")); err != nil {
		return err
	}
	b.ctx, b.cancel = context.WithCancel(context.WithoutCancel(ctx))
	ver, err := b.cs.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("cluster unreachable: %w", err)
	}
	if _, err := b.cs.StorageV1().CSIDrivers().Get(ctx, t.Name, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("the cluster has no CSIDriver %q (kubectl get csidrivers lists those it has)", t.Name)
		}
		return fmt.Errorf("CSIDriver %s: %w", t.Name, err)
	}
	b.logf("cluster %s (Kubernetes %s), foreign driver %s, workload image %s", b.cfg.Host, ver.GitVersion, t.Name, b.opts.Image)
	if err := b.removeStale(ctx); err != nil {
		return err
	}
	// Only now: removeStale looks after the scenario runs' own driver name, never a foreign driver.
	b.opts.DriverName = t.Name
	b.n = runNames(sc.Name)
	b.n.foreign = true
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.n.namespace, Labels: map[string]string{
		managedByLabel: managedBy, scenarioLabel: sc.Name,
	}}}
	if _, err := b.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace: %w", err)
	}
	b.life.nsCreated = true
	b.progress("namespace %s", b.n.namespace)
	b.startInformers()
	if err := b.installDriverRemediator(ctx); err != nil {
		return err
	}

	lbl := map[string]string{managedByLabel: managedBy}
	pod, err := b.man.workloadPod(sc, b.n, b.opts.Image, b.opts.ReadInterval, lbl, podServer{})
	if err != nil {
		return err
	}
	if err := b.driverVolume(ctx, pod, lbl); err != nil {
		return err
	}
	readPath := t.ReadPath
	if readPath == "" {
		if readPath, err = b.findReadPath(ctx, pod); err != nil {
			return err
		}
	}
	readFrom(pod, readPath)
	writeYAML(filepath.Join(b.dir, "workload-pod.yaml"), pod)
	b.pod.spec = pod
	if err := b.podUp(ctx, true); err != nil {
		return err
	}
	pp, err := b.discoverPlugin(ctx)
	if err != nil {
		return err
	}
	b.progress("node plugin of %s on node %s: pod %s/%s of DaemonSet %s (%s)", t.Name, b.node, pp.pod.Namespace, pp.pod.Name, pp.ds, pp.why)
	return nil
}

// installDriverRemediator deploys this project's remediator alone (chart csi.enabled=false) to look after the
// foreign driver's volumes (remediation.drivers), when the row asks for it (Plugin.Remediation): what a user of
// that driver installs (chart/README.md, "For any FUSE CSI driver").
func (b *Backend) installDriverRemediator(ctx context.Context) error {
	r := b.sc.Plugin.Remediation
	if r == nil {
		return nil
	}
	var err error
	if b.logs.remediator, err = b.env.Log("remediator.log"); err != nil {
		return err
	}
	vals := b.releaseValues()
	vals["csi"] = map[string]any{"enabled": false}
	if err := mergeSets(vals, append(r.ChartSets(), "remediation.drivers={"+b.opts.Driver.Name+"}")); err != nil {
		return err
	}
	writeYAML(filepath.Join(b.dir, "chart-values.yaml"), vals)
	b.helm = b.release()
	b.progress("helm install %s: the remediator alone, for driver %s (grace %s, interval %s)", releaseName, b.opts.Driver.Name, r.Grace, r.Interval)
	b.life.installed = true // a failed install may have created objects: uninstall in Stop either way
	if err := b.helm.install(ctx, vals, b.opts.SetupTimeout); err != nil {
		return err
	}
	return nil
}

// driverVolume gives the pod the driver's volume: a claim of the StorageClass, a claim bound to the run's copy
// of the static PV, or an inline CSI volume. It sets the run's names for the volume's host paths.
func (b *Backend) driverVolume(ctx context.Context, pod *corev1.Pod, lbl map[string]string) error {
	t := b.opts.Driver
	vol := &pod.Spec.Volumes[0]
	if len(t.VolumeAttributes) > 0 {
		// An inline volume's dir is named after the pod's volume.
		vol.VolumeSource = corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: t.Name, VolumeAttributes: t.VolumeAttributes, ReadOnly: ptrTo(true)}}
		b.n.pv, b.n.pvc = vol.Name, ""
		return nil
	}
	claim := b.man.claim(b.n, lbl)
	if t.StorageClass != "" {
		claim.Spec.StorageClassName, claim.Spec.VolumeName = ptrTo(t.StorageClass), ""
		b.n.pv = "" // the provisioner names it; the run does not own it
	} else {
		pv, err := readPV(t.PVFile, t.Name)
		if err != nil {
			return err
		}
		pv.Name, pv.Labels, pv.Spec.ClaimRef = b.n.pv, mergeLabels(pv.Labels, lbl), nil
		b.n.volumeHandle, b.n.ownPV = pv.Spec.CSI.VolumeHandle, true
		claim.Spec.StorageClassName = ptrTo(pv.Spec.StorageClassName)
		claim.Spec.AccessModes = pv.Spec.AccessModes
		if _, err := b.cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create PV from %s: %w", t.PVFile, err)
		}
		b.progress("PV %s created from %s (volume handle %s)", pv.Name, t.PVFile, pv.Spec.CSI.VolumeHandle)
	}
	if _, err := b.cs.CoreV1().PersistentVolumeClaims(b.n.namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create PVC: %w", err)
	}
	if t.StorageClass != "" {
		class, err := b.cs.StorageV1().StorageClasses().Get(ctx, t.StorageClass, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("--storage-class %s: %w", t.StorageClass, err)
		}
		if class.Provisioner != t.Name {
			b.progress("warning: StorageClass %s provisions with %s, not --driver %s", class.Name, class.Provisioner, t.Name)
		}
		if m := class.VolumeBindingMode; m != nil && *m == storagev1.VolumeBindingWaitForFirstConsumer {
			b.logf("PVC %s: class %s binds it once the pod is scheduled", b.n.pvc, class.Name)
			return nil // boundVolume names the PV once the pod is scheduled
		}
	}
	pv, err := b.boundVolume(ctx)
	if err != nil {
		return err
	}
	b.n.pv = pv
	return nil
}

// boundVolume waits until the run's claim is bound and returns its PV's name.
func (b *Backend) boundVolume(ctx context.Context) (string, error) {
	var pv string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, b.opts.SetupTimeout, true, func(ctx context.Context) (bool, error) {
		c, err := b.cs.CoreV1().PersistentVolumeClaims(b.n.namespace).Get(ctx, b.n.pvc, metav1.GetOptions{})
		if err == nil && c.Status.Phase == corev1.ClaimBound {
			pv = c.Spec.VolumeName
		}
		return pv != "", nil
	}); err != nil {
		return "", fmt.Errorf("PVC %s not bound: %w", b.n.pvc, err)
	}
	b.logf("PVC %s bound to PV %s", b.n.pvc, pv)
	return pv, nil
}

// readPV reads a static PV of driver from file.
func readPV(file, driver string) (*corev1.PersistentVolume, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--pv: %w", err)
	}
	var pv corev1.PersistentVolume
	if err := yaml.UnmarshalStrict(raw, &pv); err != nil {
		return nil, fmt.Errorf("--pv %s: %w", file, err)
	}
	switch {
	case pv.Kind != "PersistentVolume":
		return nil, fmt.Errorf("--pv %s: kind %q, want PersistentVolume", file, pv.Kind)
	case pv.Spec.CSI == nil:
		return nil, fmt.Errorf("--pv %s: not a CSI volume (no spec.csi)", file)
	case pv.Spec.CSI.Driver != driver:
		return nil, fmt.Errorf("--pv %s: its driver is %q, not --driver %q", file, pv.Spec.CSI.Driver, driver)
	case pv.Spec.CSI.VolumeHandle == "":
		return nil, fmt.Errorf("--pv %s: no spec.csi.volumeHandle", file)
	}
	return &pv, nil
}

// readFrom points the workload containers at the read path: the whole volume at their mount path, the subPath
// container's file alone.
func readFrom(pod *corev1.Pod, readPath string) {
	readPath = path.Clean(readPath)
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		m := &c.VolumeMounts[0]
		file := path.Join(m.MountPath, readPath)
		if m.SubPath != "" {
			m.SubPath, m.MountPath = readPath, "/mnt/"+path.Base(readPath)
			file = m.MountPath
		}
		c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--file=") })
		c.Args = append([]string{"--file=" + file}, c.Args...)
	}
}

func ptrTo[T any](v T) *T { return &v }

// foreignPaths is setPaths for a foreign driver: the staging dir only when a static PV gave the handle. A
// claim of a WaitForFirstConsumer class is bound by now, or soon: the pod is scheduled.
func (b *Backend) foreignPaths(uid string) map[string]string {
	if b.n.pv == "" {
		if pv, err := b.boundVolume(b.ctx); err == nil {
			b.n.pv = pv
		} else {
			b.logf("%v", err)
		}
	}
	root := b.opts.KubeletDir
	p := map[string]string{
		scenarios.PathRoot:   root,
		scenarios.PathVolume: kubeletpath.Target(root, uid, b.n.pv),
	}
	if b.n.volumeHandle != "" {
		p[scenarios.PathStaging] = kubeletpath.Staging(root, b.opts.DriverName, b.n.volumeHandle)
	}
	return p
}

// findReadPath finds the first regular file of the volume, in lexical order (filepath.WalkDir), for a run
// without --read-path. The volume's content is seen on the node, so this machine must be the node: a finder
// pod (the workload image, reading nothing) gets the volume published, the walk reads its volume dir on the
// host, and the pod is deleted before the workload's is created.
func (b *Backend) findReadPath(ctx context.Context, pod *corev1.Pod) (string, error) {
	if !fileExists(filepath.Join(b.opts.KubeletDir, "pods")) {
		return "", fmt.Errorf("--read-path is required unless this machine is the node (no %s here to find a file in)", filepath.Join(b.opts.KubeletDir, "pods"))
	}
	f := pod.DeepCopy()
	f.Name = pod.Name + "-finder"
	f.Labels = map[string]string{managedByLabel: managedBy} // not the workload's: its evidence is not the run's
	f.Spec.RestartPolicy = corev1.RestartPolicyNever
	c := f.Spec.Containers[0]
	c.Name, c.Args = "finder", []string{"--file=/mnt/.dfc-finder-reads-nothing", "--read-interval=1h"}
	c.VolumeMounts = []corev1.VolumeMount{{Name: c.VolumeMounts[0].Name, MountPath: "/mnt", ReadOnly: true}}
	f.Spec.Containers = []corev1.Container{c}
	pods := b.cs.CoreV1().Pods(f.Namespace)
	created, err := pods.Create(ctx, f, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create the finder pod: %w", err)
	}
	defer func() {
		_ = pods.Delete(context.WithoutCancel(ctx), f.Name, metav1.DeleteOptions{GracePeriodSeconds: &zeroGrace})
		_ = b.waitGone(context.WithoutCancel(ctx), "finder pod", 2*time.Minute, func(ctx context.Context) error {
			_, err := pods.Get(ctx, f.Name, metav1.GetOptions{})
			return err
		})
	}()
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, b.opts.SetupTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, f.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	}); err != nil {
		return "", fmt.Errorf("finder pod not running (the volume not published?): %w", err)
	}
	vol := b.n.pv
	if vol == "" {
		if vol, err = b.boundVolume(ctx); err != nil {
			return "", err
		}
	}
	dir := kubeletpath.Target(b.opts.KubeletDir, string(created.UID), vol)
	found, err := firstFile(ctx, dir)
	if err != nil {
		return "", err
	}
	b.progress("read path: %s, the first regular file of the volume (no --read-path given)", found)
	return found, nil
}

// firstFile returns the first regular file below dir in lexical order, relative to dir; the walk runs in a
// goroutine, so that a volume that does not answer costs a bounded wait, not a hang of the run.
func firstFile(ctx context.Context, dir string) (string, error) {
	type res struct {
		path string
		err  error
	}
	done := make(chan res, 1)
	go func() {
		errFound := errors.New("found")
		var found string
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type().IsRegular() {
				found = p
				return errFound
			}
			return nil
		})
		if found != "" {
			rel, err := filepath.Rel(dir, found)
			done <- res{rel, err}
			return
		}
		if err == nil {
			err = fmt.Errorf("the volume (%s) holds no regular file to read: give --read-path", dir)
		}
		done <- res{"", err}
	}()
	select {
	case r := <-done:
		return r.path, r.err
	case <-time.After(30 * time.Second):
		return "", fmt.Errorf("no answer from a walk of %s within 30s: give --read-path", dir)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}
