// Package drivers holds no code: its test checks every foreign driver dir of hack/drivers without a cluster,
// what make driver-up would apply and what dfc-scenario --driver would need of it.
package drivers

import (
	"bufio"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// kubeletDir is the from-source cluster's kubelet root (hack/cluster/lib.sh KUBELET_ROOT_DIR).
const kubeletDir = "/var/lib/kubelet"

// driverDir is one hack/drivers/<driver>: its driver.env and every object of its YAML files.
type driverDir struct {
	dir  string
	env  map[string]string
	objs map[string][]any // file -> objects, strictly decoded
}

func TestDriverDirs(t *testing.T) {
	envs, err := filepath.Glob("*/driver.env")
	if err != nil || len(envs) == 0 {
		t.Fatalf("no hack/drivers/*/driver.env: %v", err)
	}
	for _, e := range envs {
		dir := filepath.Dir(e)
		t.Run(dir, func(t *testing.T) {
			d := load(t, dir)
			checkGeneric(t, d)
			if dir == "k8s-csi-s3" {
				checkK8sCSIS3(t, d)
			}
		})
	}
}

// readEnv reads the KEY=VALUE lines of a driver.env (what up.sh sources: no expansions are used there).
func readEnv(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	line := regexp.MustCompile(`^([A-Z_][A-Z0-9_]*)=(.*)$`)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := line.FindStringSubmatch(sc.Text()); m != nil {
			if strings.ContainsAny(m[2], "$`") {
				t.Errorf("%s: %s=%s: keep driver.env literal (its Go test reads it without a shell)", file, m[1], m[2])
			}
			env[m[1]] = strings.Trim(m[2], `"'`)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return env
}

func load(t *testing.T, dir string) driverDir {
	t.Helper()
	d := driverDir{dir: dir, env: readEnv(t, filepath.Join(dir, "driver.env")), objs: map[string][]any{}}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no manifests: %v", dir, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Base(f)
		for _, doc := range releaseutil.SplitManifests(string(data)) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var o any
			switch tm.APIVersion + "/" + tm.Kind {
			case "v1/Secret":
				o = &corev1.Secret{}
			case "v1/Pod":
				o = &corev1.Pod{}
			case "v1/ServiceAccount":
				o = &corev1.ServiceAccount{}
			case "v1/PersistentVolume":
				o = &corev1.PersistentVolume{}
			case "v1/PersistentVolumeClaim":
				o = &corev1.PersistentVolumeClaim{}
			case "apps/v1/DaemonSet":
				o = &appsv1.DaemonSet{}
			case "storage.k8s.io/v1/CSIDriver":
				o = &storagev1.CSIDriver{}
			case "rbac.authorization.k8s.io/v1/ClusterRole":
				o = &rbacv1.ClusterRole{}
			case "rbac.authorization.k8s.io/v1/ClusterRoleBinding":
				o = &rbacv1.ClusterRoleBinding{}
			default:
				t.Errorf("%s: %s %s: a kind this test does not know; add it", f, tm.APIVersion, tm.Kind)
				continue
			}
			if err := yaml.UnmarshalStrict([]byte(doc), o); err != nil {
				t.Errorf("%s: strict decoding of %s: %v", f, tm.Kind, err)
				continue
			}
			d.objs[base] = append(d.objs[base], o)
		}
	}
	return d
}

// all returns the objects of type T in the files named, every file when none is.
func all[T any](d driverDir, files ...string) []*T {
	var out []*T
	for f, objs := range d.objs {
		if len(files) > 0 && !slices.Contains(files, f) {
			continue
		}
		for _, o := range objs {
			if v, ok := o.(*T); ok {
				out = append(out, v)
			}
		}
	}
	return out
}

// pods are the pod specs of the applied manifests: Pods and DaemonSets' templates, by name.
func pods(d driverDir, files []string) map[string]*corev1.PodSpec {
	out := map[string]*corev1.PodSpec{}
	for _, p := range all[corev1.Pod](d, files...) {
		out["pod/"+p.Namespace+"/"+p.Name] = &p.Spec
	}
	for _, ds := range all[appsv1.DaemonSet](d, files...) {
		out["daemonset/"+ds.Namespace+"/"+ds.Name] = &ds.Spec.Template.Spec
	}
	return out
}

func appVersion(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../../chart/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil || c.AppVersion == "" {
		t.Fatalf("chart appVersion: %q, %v", c.AppVersion, err)
	}
	return c.AppVersion
}

// checkGeneric checks what up.sh, down.sh and a driver-agnostic run rely on, for any driver dir.
func checkGeneric(t *testing.T, d driverDir) {
	for _, k := range []string{"IMAGE", "DRIVER_NAME", "MANIFESTS"} {
		if d.env[k] == "" {
			t.Fatalf("driver.env sets no %s", k)
		}
	}
	name := d.env["DRIVER_NAME"]
	applied := strings.Fields(d.env["MANIFESTS"])
	for f := range d.objs {
		if !slices.Contains(applied, f) && f != "pv.yaml" && f != "pvc.yaml" {
			t.Errorf("%s is neither in MANIFESTS (%s) nor a run's template (pv.yaml, pvc.yaml)", f, d.env["MANIFESTS"])
		}
	}
	for _, f := range applied {
		if len(d.objs[f]) == 0 {
			t.Errorf("MANIFESTS names %s, which holds no object", f)
		}
	}

	drivers := all[storagev1.CSIDriver](d, applied...)
	if len(drivers) != 1 || drivers[0].Name != name {
		t.Errorf("CSIDrivers %v, want exactly one named DRIVER_NAME %s", drivers, name)
	}

	// Images: only what up.sh imports, never pulled (the cluster has no registry).
	projectImage := "dummy-fuse-csi:" + appVersion(t)
	specs := pods(d, applied)
	for pod, spec := range specs {
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			if c.Image != d.env["IMAGE"] && c.Image != projectImage {
				t.Errorf("%s container %s: image %s, want driver.env's IMAGE %s or make image's %s", pod, c.Name, c.Image, d.env["IMAGE"], projectImage)
			}
			if c.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("%s container %s: imagePullPolicy %q, want IfNotPresent (imported images, no registry)", pod, c.Name, c.ImagePullPolicy)
			}
		}
	}
	for _, r := range strings.Fields(d.env["READY"]) {
		parts := strings.Split(r, "/") // NAMESPACE/KIND/NAME
		if len(parts) != 3 || specs[parts[1]+"/"+parts[0]+"/"+parts[2]] == nil {
			t.Errorf("READY names %s, which no applied manifest holds (a pod or a daemonset)", r)
		}
	}

	// The node plugin: registered by csi-plugin register, and found by a run as node-driver-registrar's pod is.
	socket := path.Join(kubeletDir, "plugins", name, "csi.sock")
	var registrars int
	for _, ds := range all[appsv1.DaemonSet](d, applied...) {
		spec := &ds.Spec.Template.Spec
		for _, c := range spec.Containers {
			if len(c.Command) < 2 || c.Command[1] != "register" {
				continue
			}
			registrars++
			args := flagValues(c.Command[2:])
			if args["kubelet-registration-path"] != socket {
				t.Errorf("%s: --kubelet-registration-path %q, want %s (kubelet dials it; a run finds the plugin by it)", c.Name, args["kubelet-registration-path"], socket)
			}
			if got := hostPathOf(spec, c, path.Dir(args["csi-address"])); got != path.Dir(socket) {
				t.Errorf("%s: --csi-address %s is on host dir %q, want the socket's dir %s", c.Name, args["csi-address"], got, path.Dir(socket))
			}
			if got := hostPathOf(spec, c, args["registration-dir"]); path.Clean(got) != path.Join(kubeletDir, "plugins_registry") {
				t.Errorf("%s: --registration-dir %s is host dir %q, want kubelet's plugins_registry", c.Name, args["registration-dir"], got)
			}
		}
	}
	if registrars != 1 {
		t.Errorf("%d containers run csi-plugin register in the DaemonSets, want 1", registrars)
	}

	// pv.yaml: what dfc-scenario --pv accepts (scenarios/kube readPV), its secrets applied with it.
	pvs := all[corev1.PersistentVolume](d, "pv.yaml")
	if len(pvs) != 1 {
		t.Fatalf("pv.yaml: %d PersistentVolumes, want 1", len(pvs))
	}
	pv := pvs[0]
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != name || pv.Spec.CSI.VolumeHandle == "" || pv.Spec.ClaimRef != nil {
		t.Errorf("pv.yaml: csi %+v claimRef %v; want driver %s, a volumeHandle and no claimRef (a run binds its own claim)", pv.Spec.CSI, pv.Spec.ClaimRef, name)
	}
	secrets := map[string]*corev1.Secret{}
	for _, s := range all[corev1.Secret](d, applied...) {
		secrets[s.Namespace+"/"+s.Name] = s
	}
	if pv.Spec.CSI != nil {
		for _, ref := range []*corev1.SecretReference{pv.Spec.CSI.NodeStageSecretRef, pv.Spec.CSI.NodePublishSecretRef} {
			if ref != nil && secrets[ref.Namespace+"/"+ref.Name] == nil {
				t.Errorf("pv.yaml names Secret %s/%s, which MANIFESTS does not apply", ref.Namespace, ref.Name)
			}
		}
	}
	for _, pvc := range all[corev1.PersistentVolumeClaim](d, "pvc.yaml") {
		if pvc.Spec.VolumeName != pv.Name || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != pv.Spec.StorageClassName {
			t.Errorf("pvc.yaml: volumeName %q class %v; want pv.yaml's %s, class %q", pvc.Spec.VolumeName, pvc.Spec.StorageClassName, pv.Name, pv.Spec.StorageClassName)
		}
	}
}

// checkK8sCSIS3 checks that the fake S3, the Secret, the node plugin and the PV fit together.
func checkK8sCSIS3(t *testing.T, d driverDir) {
	applied := strings.Fields(d.env["MANIFESTS"])
	secrets := all[corev1.Secret](d, applied...)
	if len(secrets) != 1 {
		t.Fatalf("%d Secrets, want 1", len(secrets))
	}
	secret := secrets[0]
	for _, k := range []string{"accessKeyID", "secretAccessKey", "endpoint"} {
		if secret.StringData[k] == "" {
			t.Errorf("Secret %s has no %s (what the driver reads: pkg/s3 NewClientFromSecret)", secret.Name, k)
		}
	}
	endpoint, err := url.Parse(secret.StringData["endpoint"])
	if err != nil || endpoint.Scheme != "http" || endpoint.Hostname() != "127.0.0.1" {
		t.Fatalf("Secret endpoint %q: want http://127.0.0.1:PORT, the fake S3 on the node's loopback (%v)", secret.StringData["endpoint"], err)
	}

	specs := pods(d, applied)
	fake := specs["pod/kube-system/csi-s3-fake-s3"]
	node := specs["daemonset/kube-system/csi-s3"]
	if fake == nil || node == nil {
		t.Fatalf("want the Pod kube-system/csi-s3-fake-s3 and the DaemonSet kube-system/csi-s3")
	}
	// Both on the node's network: the plugin's rclone dials 127.0.0.1.
	if !fake.HostNetwork || !node.HostNetwork {
		t.Errorf("hostNetwork: fake S3 %v, node plugin %v; want both (the endpoint is the node's 127.0.0.1)", fake.HostNetwork, node.HostNetwork)
	}
	s3 := fake.Containers[0]
	args := flagValues(s3.Command)
	if args["addr"] != endpoint.Host {
		t.Errorf("fake S3 --addr %q, want the Secret's endpoint %s", args["addr"], endpoint.Host)
	}
	if !slices.Equal(s3.Command[:4], []string{"/usr/bin/rclone", "serve", "s3", d.env["S3_ROOT"]}) {
		t.Errorf("fake S3 command %q, want rclone serve s3 %s (the image's bucket root)", s3.Command, d.env["S3_ROOT"])
	}
	// --auth-key is the Secret's pair, through env vars taken from it.
	if args["auth-key"] != "$(AWS_ACCESS_KEY_ID),$(AWS_SECRET_ACCESS_KEY)" {
		t.Errorf("fake S3 --auth-key %q, want the Secret's keys through $(AWS_ACCESS_KEY_ID),$(AWS_SECRET_ACCESS_KEY)", args["auth-key"])
	}
	want := map[string]string{"AWS_ACCESS_KEY_ID": "accessKeyID", "AWS_SECRET_ACCESS_KEY": "secretAccessKey"}
	for _, e := range s3.Env {
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil && ref.SecretKeyRef.Name == secret.Name && want[e.Name] == ref.SecretKeyRef.Key {
			delete(want, e.Name)
		}
	}
	if len(want) != 0 {
		t.Errorf("fake S3 env lacks %v from Secret %s", want, secret.Name)
	}
	probe := s3.ReadinessProbe
	if probe == nil || probe.Exec == nil || !slices.Contains(probe.Exec.Command, ":s3:"+d.env["BUCKET"]+"/dummy-file.txt") ||
		!slices.Contains(probe.Exec.Command, "--s3-endpoint="+secret.StringData["endpoint"]) {
		t.Errorf("fake S3 readiness probe %+v: want a read of the bucket's dummy-file.txt through the Secret's endpoint (so up.sh waits for the data)", probe)
	}

	pv := all[corev1.PersistentVolume](d, "pv.yaml")[0]
	if bucket, _, _ := strings.Cut(pv.Spec.CSI.VolumeHandle, "/"); bucket != d.env["BUCKET"] {
		t.Errorf("pv.yaml volumeHandle %q: want bucket %s[/prefix], the one the image holds", pv.Spec.CSI.VolumeHandle, d.env["BUCKET"])
	}
	if m := pv.Spec.CSI.VolumeAttributes["mounter"]; m != "rclone" {
		t.Errorf("pv.yaml volumeAttributes mounter %q, want rclone", m)
	}
	if pv.Spec.CSI.NodeStageSecretRef == nil || pv.Spec.CSI.NodeStageSecretRef.Name != secret.Name {
		t.Errorf("pv.yaml: nodeStageSecretRef %v, want Secret %s (NodeStageVolume mounts with it)", pv.Spec.CSI.NodeStageSecretRef, secret.Name)
	}

	// The plugin mounts FUSE under kubelet's dirs and needs them to reach the host: privileged, /dev/fuse,
	// Bidirectional propagation of the staging and pods dirs.
	var plugin *corev1.Container
	for i := range node.Containers {
		if node.Containers[i].Image == d.env["IMAGE"] {
			plugin = &node.Containers[i]
		}
	}
	if plugin == nil {
		t.Fatalf("no container of the DaemonSet runs %s", d.env["IMAGE"])
	}
	if sc := plugin.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Errorf("%s: not privileged", plugin.Name)
	}
	for _, dir := range []string{"plugins/kubernetes.io/csi", "pods"} {
		p := path.Join(kubeletDir, dir)
		var ok bool
		for _, m := range plugin.VolumeMounts {
			if m.MountPath == p && hostPathOf(node, *plugin, p) == p && m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional {
				ok = true
			}
		}
		if !ok {
			t.Errorf("%s: no Bidirectional mount of host %s at the same path", plugin.Name, p)
		}
	}
	if hostPathOf(node, *plugin, "/dev/fuse") != "/dev/fuse" {
		t.Errorf("%s: no /dev/fuse from the host", plugin.Name)
	}
	if ep := envValue(plugin, "CSI_ENDPOINT"); hostPathOf(node, *plugin, path.Dir(strings.TrimPrefix(ep, "unix://"))) != path.Join(kubeletDir, "plugins", d.env["DRIVER_NAME"]) {
		t.Errorf("%s: CSI_ENDPOINT %q is not in the host dir the registrar announces", plugin.Name, ep)
	}
}

// flagValues maps --name=value arguments to their values.
func flagValues(args []string) map[string]string {
	out := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(strings.TrimLeft(a, "-"), "="); ok && strings.HasPrefix(a, "-") {
			out[k] = v
		}
	}
	return out
}

// hostPathOf is the host path that container path p of c is, through its hostPath volume mounts; "" if none.
func hostPathOf(spec *corev1.PodSpec, c corev1.Container, p string) string {
	p = path.Clean(p)
	for _, m := range c.VolumeMounts {
		mp := path.Clean(m.MountPath)
		rel, err := filepath.Rel(mp, p)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.HostPath != nil {
				return path.Join(path.Clean(v.HostPath.Path), rel)
			}
		}
	}
	return ""
}

func envValue(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}
