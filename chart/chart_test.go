package chart_test

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/strvals"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

const (
	releaseName      = "dfc"
	releaseNamespace = "dfc-system"
	defaultKubelet   = "/var/lib/kubelet"
	defaultDriver    = "dummy-fuse-csi"
	defaultHealth    = 9809
	pluginContainer  = "plugin"
)

// sidecarSets are the values that make registrar.mode=sidecar renderable.
var sidecarSets = []string{
	"registrar.mode=sidecar",
	"registrar.nodeDriverRegistrar.image.repository=example.org/ndr",
	"registrar.livenessProbe.image.repository=example.org/lp",
}

// objects are the decoded objects of one rendering.
type objects struct {
	ds     *appsv1.DaemonSet
	driver *storagev1.CSIDriver
	sa     *corev1.ServiceAccount
	dsYAML string
	notes  string
	// The remediator's objects (remediation.enabled).
	remDS      *appsv1.DaemonSet
	remSA      *corev1.ServiceAccount
	remRole    *rbacv1.ClusterRole
	remBinding *rbacv1.ClusterRoleBinding
	// The keeper's DaemonSet (csi.plugin.fuseMode=keeper).
	keeperDS *appsv1.DaemonSet
	// The operator's FUSE server spec (fuseServer.spec).
	serverSpec *corev1.ConfigMap
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(".")
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return c
}

// userValues parses --set style assignments, exactly as `helm install --set` does.
func userValues(t *testing.T, sets ...string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	for _, s := range sets {
		if err := strvals.ParseInto(s, vals); err != nil {
			t.Fatalf("parse --set %q: %v", s, err)
		}
	}
	return vals
}

// renderChart is what `helm template` does: coalesce values, validate them against the schema, render.
func renderChart(c *chart.Chart, vals map[string]any) (map[string]string, error) {
	opts := chartutil.ReleaseOptions{Name: releaseName, Namespace: releaseNamespace, IsInstall: true}
	top, err := chartutil.ToRenderValues(c, vals, opts, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(c, top)
}

func render(t *testing.T, sets ...string) objects {
	t.Helper()
	out, err := renderChart(loadChart(t), userValues(t, sets...))
	if err != nil {
		t.Fatalf("render with %q: %v", sets, err)
	}
	return decode(t, out)
}

// decode is decodeAll of a rendering that installs the driver (csi.enabled): it has the plugin's DaemonSet,
// CSIDriver and ServiceAccount.
func decode(t *testing.T, rendered map[string]string) objects {
	t.Helper()
	o := decodeAll(t, rendered)
	if o.ds == nil || o.driver == nil || o.sa == nil {
		t.Fatalf("want a DaemonSet, a CSIDriver and a ServiceAccount, got %+v", o)
	}
	return o
}

// decodeAll parses every rendered document strictly into its k8s.io/api type, so that a misspelt field in a
// template fails here rather than being dropped by the API server.
func decodeAll(t *testing.T, rendered map[string]string) objects {
	t.Helper()
	var o objects
	for name, content := range rendered {
		if strings.HasSuffix(name, "NOTES.txt") {
			o.notes = content
			continue
		}
		for _, doc := range releaseutil.SplitManifests(content) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var meta struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			remediator := meta.Metadata.Labels["app.kubernetes.io/component"] == "remediator"
			keeper := meta.Metadata.Labels["app.kubernetes.io/component"] == "keeper"
			var target any
			switch kind := tm.APIVersion + "/" + tm.Kind; {
			case keeper && kind == "apps/v1/DaemonSet" && o.keeperDS == nil:
				o.keeperDS, target = &appsv1.DaemonSet{}, &o.keeperDS
			case keeper:
				t.Fatalf("%s: unexpected or second keeper object %s", name, kind)
			case remediator && kind == "apps/v1/DaemonSet" && o.remDS == nil:
				o.remDS, target = &appsv1.DaemonSet{}, &o.remDS
			case remediator && kind == "v1/ServiceAccount" && o.remSA == nil:
				o.remSA, target = &corev1.ServiceAccount{}, &o.remSA
			case remediator && kind == "rbac.authorization.k8s.io/v1/ClusterRole" && o.remRole == nil:
				o.remRole, target = &rbacv1.ClusterRole{}, &o.remRole
			case remediator && kind == "rbac.authorization.k8s.io/v1/ClusterRoleBinding" && o.remBinding == nil:
				o.remBinding, target = &rbacv1.ClusterRoleBinding{}, &o.remBinding
			case remediator:
				t.Fatalf("%s: unexpected or second remediator object %s", name, kind)
			case kind == "apps/v1/DaemonSet":
				if o.ds != nil {
					t.Fatalf("%s: second DaemonSet", name)
				}
				o.ds, o.dsYAML, target = &appsv1.DaemonSet{}, doc, &o.ds
			case kind == "storage.k8s.io/v1/CSIDriver":
				if o.driver != nil {
					t.Fatalf("%s: second CSIDriver", name)
				}
				o.driver, target = &storagev1.CSIDriver{}, &o.driver
			case kind == "v1/ConfigMap" && o.serverSpec == nil:
				o.serverSpec, target = &corev1.ConfigMap{}, &o.serverSpec
			case kind == "v1/ServiceAccount":
				if o.sa != nil {
					t.Fatalf("%s: second ServiceAccount", name)
				}
				o.sa, target = &corev1.ServiceAccount{}, &o.sa
			default:
				t.Fatalf("%s: unexpected object %s %s", name, tm.APIVersion, tm.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), target); err != nil {
				t.Fatalf("%s: strict decoding of %s: %v\n%s", name, tm.Kind, err, doc)
			}
		}
	}
	return o
}

func container(t *testing.T, ds *appsv1.DaemonSet, name string) *corev1.Container {
	t.Helper()
	for i := range ds.Spec.Template.Spec.Containers {
		if c := &ds.Spec.Template.Spec.Containers[i]; c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q in the DaemonSet", name)
	return nil
}

func containerNames(ds *appsv1.DaemonSet) []string {
	var names []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		names = append(names, c.Name)
	}
	return names
}

func volume(t *testing.T, ds *appsv1.DaemonSet, name string) *corev1.Volume {
	t.Helper()
	for i := range ds.Spec.Template.Spec.Volumes {
		if v := &ds.Spec.Template.Spec.Volumes[i]; v.Name == name {
			return v
		}
	}
	t.Fatalf("no volume %q in the DaemonSet", name)
	return nil
}

// argsWithFlag returns the container's arguments that set flag (--flag or --flag=value).
func argsWithFlag(c *corev1.Container, flag string) []string {
	var out []string
	for _, a := range c.Args {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			out = append(out, a)
		}
	}
	return out
}

// wantArg checks that flag appears exactly once, as want.
func wantArg(t *testing.T, c *corev1.Container, flag, want string) {
	t.Helper()
	if got := argsWithFlag(c, flag); len(got) != 1 || got[0] != want {
		t.Errorf("container %s: %s arguments = %q, want [%q]; all args %q", c.Name, flag, got, want, c.Args)
	}
}

func wantNoArg(t *testing.T, c *corev1.Container, flag string) {
	t.Helper()
	if got := argsWithFlag(c, flag); len(got) != 0 {
		t.Errorf("container %s: unexpected %q", c.Name, got)
	}
}

// checkInvariants holds for every valid value set: the properties a CSI node plugin needs to work at all.
func checkInvariants(t *testing.T, o objects, kubeletDir, driver, stateDir string) {
	t.Helper()
	ds := o.ds
	spec := ds.Spec.Template.Spec

	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("selector %v does not select the pod template labels %v (%v)", ds.Spec.Selector, ds.Spec.Template.Labels, err)
	}
	if ds.Namespace != releaseNamespace || o.sa.Namespace != releaseNamespace {
		t.Errorf("namespaces: DaemonSet %q, ServiceAccount %q, want the release namespace %q", ds.Namespace, o.sa.Namespace, releaseNamespace)
	}
	if spec.ServiceAccountName != o.sa.Name {
		t.Errorf("serviceAccountName %q, ServiceAccount %q", spec.ServiceAccountName, o.sa.Name)
	}
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType ||
		ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 1 {
		t.Errorf("updateStrategy %+v, want RollingUpdate with maxUnavailable 1", ds.Spec.UpdateStrategy)
	}

	// Only the plugin container may be privileged, and it must be.
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		priv := c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
		if priv != (c.Name == pluginContainer) {
			t.Errorf("container %s: privileged=%v", c.Name, priv)
		}
		if c.ImagePullPolicy == corev1.PullAlways {
			t.Errorf("container %s: imagePullPolicy Always breaks images loaded into the node", c.Name)
		}
	}

	plugin := container(t, ds, pluginContainer)
	if plugin.Command[0] != "/usr/local/bin/csi-plugin" {
		t.Errorf("plugin command %q", plugin.Command)
	}
	wantArg(t, plugin, "--endpoint", "--endpoint=unix:///csi/csi.sock")
	wantArg(t, plugin, "--nodeid", "--nodeid=$(NODE_NAME)")
	wantArg(t, plugin, "--drivername", "--drivername="+driver)
	wantArg(t, plugin, "--state-dir", "--state-dir="+stateDir)
	if len(plugin.Env) == 0 || plugin.Env[0].Name != "NODE_NAME" || plugin.Env[0].ValueFrom == nil ||
		plugin.Env[0].ValueFrom.FieldRef == nil || plugin.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME must come first from the downward API spec.nodeName (it is used in --nodeid): %+v", plugin.Env)
	}

	// Mounts: the plugin sees the kubelet dirs at kubelet's own paths; Bidirectional exactly on pods and
	// plugins, so the FUSE and bind mounts it makes reach the host.
	bidi := map[string]string{"pods-dir": kubeletDir + "/pods", "plugins-dir": kubeletDir + "/plugins"}
	for _, c := range spec.Containers {
		for _, m := range c.VolumeMounts {
			want, isBidi := bidi[m.Name]
			gotBidi := m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional
			if gotBidi != (isBidi && c.Name == pluginContainer) {
				t.Errorf("container %s mount %s: mountPropagation %v", c.Name, m.Name, m.MountPropagation)
			}
			if isBidi && (m.MountPath != want || volume(t, ds, m.Name).HostPath.Path != want) {
				t.Errorf("mount %s: mountPath %q hostPath %q, want both %q", m.Name, m.MountPath, volume(t, ds, m.Name).HostPath.Path, want)
			}
		}
	}
	for name := range bidi {
		if !slices.ContainsFunc(plugin.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == name }) {
			t.Errorf("plugin container does not mount %s", name)
		}
	}

	hostPaths := map[string]struct {
		path string
		typ  corev1.HostPathType
	}{
		"socket-dir":       {kubeletDir + "/plugins/" + driver, corev1.HostPathDirectoryOrCreate},
		"registration-dir": {kubeletDir + "/plugins_registry", corev1.HostPathDirectory},
		"fuse-device":      {"/dev/fuse", corev1.HostPathCharDev},
		"state-dir":        {stateDir, corev1.HostPathDirectoryOrCreate},
	}
	for name, want := range hostPaths {
		hp := volume(t, ds, name).HostPath
		if hp == nil || hp.Path != want.path || hp.Type == nil || *hp.Type != want.typ {
			t.Errorf("volume %s: hostPath %+v, want %s (%s)", name, hp, want.path, want.typ)
		}
	}
	for _, m := range plugin.VolumeMounts {
		if m.Name == "state-dir" && m.MountPath != stateDir {
			t.Errorf("state dir mounted at %q, want the --state-dir %q", m.MountPath, stateDir)
		}
	}

	// The liveness probe's named port must be a port of the probed container.
	lp := plugin.LivenessProbe
	if lp == nil || lp.HTTPGet == nil || lp.HTTPGet.Path != "/healthz" {
		t.Fatalf("plugin liveness probe %+v, want httpGet /healthz", lp)
	}
	if !slices.ContainsFunc(plugin.Ports, func(p corev1.ContainerPort) bool {
		return p.Name == lp.HTTPGet.Port.String() && p.ContainerPort > 0
	}) {
		t.Errorf("liveness probe port %q is not a port of the plugin container %+v", lp.HTTPGet.Port.String(), plugin.Ports)
	}

	if sel := spec.NodeSelector["kubernetes.io/os"]; sel != "linux" {
		t.Errorf("nodeSelector %v, want kubernetes.io/os: linux", spec.NodeSelector)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Operator == corev1.TolerationOpExists && tl.Key == "" && tl.Effect == ""
	}) {
		t.Errorf("tolerations %+v, want one with operator Exists that tolerates every taint", spec.Tolerations)
	}

	d := o.driver
	if d.Name != driver {
		t.Errorf("CSIDriver name %q, want %q", d.Name, driver)
	}
	if d.Spec.AttachRequired == nil || *d.Spec.AttachRequired {
		t.Errorf("CSIDriver attachRequired %v, want false", d.Spec.AttachRequired)
	}
	if !slices.Equal(d.Spec.VolumeLifecycleModes, []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral}) {
		t.Errorf("CSIDriver volumeLifecycleModes %v", d.Spec.VolumeLifecycleModes)
	}
	if !strings.Contains(o.notes, "make scenario-restart BACKEND=kube") || !strings.Contains(o.notes, ds.Name) {
		t.Errorf("NOTES.txt does not tell the next steps for %s:\n%s", ds.Name, o.notes)
	}
}

func TestDefaults(t *testing.T) {
	o := render(t)
	checkInvariants(t, o, defaultKubelet, defaultDriver, "/var/lib/dummy-fuse-csi")
	c := loadChart(t)

	if got, want := o.ds.Name, releaseName+"-dummy-fuse-csi-node"; got != want {
		t.Errorf("DaemonSet name %q, want %q", got, want)
	}
	if got := containerNames(o.ds); !slices.Equal(got, []string{pluginContainer}) {
		t.Errorf("containers %q, want only the plugin (built-in registration)", got)
	}
	p := container(t, o.ds, pluginContainer)
	if want := "dummy-fuse-csi:" + c.Metadata.AppVersion; p.Image != want {
		t.Errorf("image %q, want %q (tag defaults to appVersion)", p.Image, want)
	}
	if p.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("imagePullPolicy %q", p.ImagePullPolicy)
	}
	wantArg(t, p, "--restore-mounts", "--restore-mounts")
	wantArg(t, p, "--restore-strategy", "--restore-strategy=rebind")
	wantArg(t, p, "--fuse-mode", "--fuse-mode=child")
	wantNoArg(t, p, "--fuse-direct-io")
	wantArg(t, p, "--health-port", "--health-port=9809")
	wantArg(t, p, "--kubelet-registration-path", "--kubelet-registration-path=/var/lib/kubelet/plugins/dummy-fuse-csi/csi.sock")
	wantArg(t, p, "--registration-dir", "--registration-dir=/registration")
	wantArg(t, p, "--v", "--v=4")
	if !slices.ContainsFunc(p.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "registration-dir" && m.MountPath == "/registration"
	}) {
		t.Errorf("plugin does not mount the registration dir at /registration: %+v", p.VolumeMounts)
	}
	if p.Ports[0].ContainerPort != defaultHealth {
		t.Errorf("health port %d", p.Ports[0].ContainerPort)
	}
	if p.Resources.Limits.Memory().IsZero() || p.Resources.Requests.Cpu().IsZero() {
		t.Errorf("plugin resources %+v, want requests and a memory limit", p.Resources)
	}
	if o.ds.Spec.Template.Spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q", o.ds.Spec.Template.Spec.PriorityClassName)
	}
	if o.sa.AutomountServiceAccountToken == nil || *o.sa.AutomountServiceAccountToken {
		t.Errorf("the plugin never calls the API server; automountServiceAccountToken should be false")
	}
	d := o.driver.Spec
	if d.PodInfoOnMount == nil || !*d.PodInfoOnMount || d.RequiresRepublish == nil || *d.RequiresRepublish {
		t.Errorf("CSIDriver podInfoOnMount %v requiresRepublish %v, want true/false", d.PodInfoOnMount, d.RequiresRepublish)
	}
}

// TestValueSets renders the value sets the scenarios and users need and checks what each one changes.
func TestValueSets(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sets  []string
		check func(t *testing.T, o objects)
	}{
		{"restoreMounts=false drops --restore-mounts", []string{"csi.plugin.restoreMounts=false"}, func(t *testing.T, o objects) {
			wantNoArg(t, container(t, o.ds, pluginContainer), "--restore-mounts")
		}},
		{"restoreStrategy=stack", []string{"csi.plugin.restoreStrategy=stack"}, func(t *testing.T, o objects) {
			p := container(t, o.ds, pluginContainer)
			if o.ds.Spec.Template.Spec.HostPID {
				t.Errorf("restoreStrategy=stack: the plugin pods have hostPID, which only setns needs")
			}
			wantArg(t, p, "--restore-strategy", "--restore-strategy=stack")
			wantArg(t, p, "--restore-mounts", "--restore-mounts")
			if strings.Contains(o.notes, "restoreStrategy=stack") {
				t.Errorf("NOTES.txt still asks for restoreStrategy=stack")
			}
		}},
		{"restoreStrategy=setns gives hostPID", []string{"csi.plugin.restoreStrategy=setns"}, func(t *testing.T, o objects) {
			wantArg(t, container(t, o.ds, pluginContainer), "--restore-strategy", "--restore-strategy=setns")
			if !o.ds.Spec.Template.Spec.HostPID {
				t.Errorf("restoreStrategy=setns: the plugin pods lack hostPID, so the plugin cannot see the containers")
			}
		}},
		{"directIO", []string{"csi.plugin.directIO=true"}, func(t *testing.T, o objects) {
			wantArg(t, container(t, o.ds, pluginContainer), "--fuse-direct-io", "--fuse-direct-io")
		}},
		{"logVerbosity", []string{"logVerbosity=6"}, func(t *testing.T, o objects) {
			wantArg(t, container(t, o.ds, pluginContainer), "--v", "--v=6")
		}},
		{"image", []string{"image.repository=example.org/dfc", "image.tag=v9", "image.pullPolicy=Never"}, func(t *testing.T, o objects) {
			p := container(t, o.ds, pluginContainer)
			if p.Image != "example.org/dfc:v9" || p.ImagePullPolicy != corev1.PullNever {
				t.Errorf("image %q %q", p.Image, p.ImagePullPolicy)
			}
		}},
		{"healthPort", []string{"healthPort=19809"}, func(t *testing.T, o objects) {
			p := container(t, o.ds, pluginContainer)
			wantArg(t, p, "--health-port", "--health-port=19809")
			if p.Ports[0].ContainerPort != 19809 {
				t.Errorf("containerPort %d", p.Ports[0].ContainerPort)
			}
		}},
		{"fuseMode=sidecar", []string{"csi.plugin.fuseMode=sidecar"}, func(t *testing.T, o objects) {
			wantArg(t, container(t, o.ds, pluginContainer), "--fuse-mode", "--fuse-mode=sidecar")
			if !*o.driver.Spec.PodInfoOnMount {
				t.Error("podInfoOnMount is off: the sidecar mode cannot find the pod")
			}
		}},
		{"csiDriver", []string{"csiDriver.requiresRepublish=true", "csiDriver.podInfoOnMount=false"}, func(t *testing.T, o objects) {
			d := o.driver.Spec
			if !*d.RequiresRepublish || *d.PodInfoOnMount {
				t.Errorf("requiresRepublish %v podInfoOnMount %v", *d.RequiresRepublish, *d.PodInfoOnMount)
			}
		}},
		{"no priority class, no node selector", []string{"priorityClassName=", "nodeSelector=null"}, func(t *testing.T, o objects) {
			// checkInvariants is skipped for this set: the node selector is gone on purpose.
			if s := o.ds.Spec.Template.Spec; s.PriorityClassName != "" || len(s.NodeSelector) != 0 {
				t.Errorf("priorityClassName %q nodeSelector %v", s.PriorityClassName, s.NodeSelector)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := render(t, tc.sets...)
			if !strings.HasPrefix(tc.name, "no priority class") {
				checkInvariants(t, o, defaultKubelet, defaultDriver, "/var/lib/dummy-fuse-csi")
			}
			tc.check(t, o)
		})
	}
}

// TestKubeletDirAndDriverName: a kubelet with another --root-dir and another driver name move every host
// path; nothing may still point at the default kubelet dir.
func TestKubeletDirAndDriverName(t *testing.T) {
	for _, mode := range [][]string{nil, sidecarSets} {
		sets := append([]string{"kubeletDir=/data/kubelet", "driverName=fuse.example.org", "stateDir=/data/dfc"}, mode...)
		t.Run(strings.Join(sets, ","), func(t *testing.T) {
			o := render(t, sets...)
			checkInvariants(t, o, "/data/kubelet", "fuse.example.org", "/data/dfc")
			if strings.Contains(o.dsYAML, defaultKubelet) {
				t.Errorf("the DaemonSet still names %s:\n%s", defaultKubelet, o.dsYAML)
			}
			reg := container(t, o.ds, pluginContainer)
			if len(mode) > 0 {
				reg = container(t, o.ds, "node-driver-registrar")
			}
			wantArg(t, reg, "--kubelet-registration-path", "--kubelet-registration-path=/data/kubelet/plugins/fuse.example.org/csi.sock")
		})
	}
}

// TestSidecarMode: the upstream sidecars register the plugin and serve /healthz, so the plugin's built-in
// registrar and health server must be off (two servers on one port, two registrations).
func TestSidecarMode(t *testing.T) {
	o := render(t, sidecarSets...)
	checkInvariants(t, o, defaultKubelet, defaultDriver, "/var/lib/dummy-fuse-csi")
	if got := containerNames(o.ds); !slices.Equal(got, []string{pluginContainer, "node-driver-registrar", "liveness-probe"}) {
		t.Fatalf("containers %q", got)
	}
	p := container(t, o.ds, pluginContainer)
	for _, flag := range []string{"--kubelet-registration-path", "--registration-dir", "--health-port"} {
		wantNoArg(t, p, flag)
	}
	if slices.ContainsFunc(p.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "registration-dir" }) {
		t.Errorf("plugin mounts the registration dir in sidecar mode")
	}

	ndr := container(t, o.ds, "node-driver-registrar")
	if ndr.Image != "example.org/ndr:v2.13.0" {
		t.Errorf("node-driver-registrar image %q", ndr.Image)
	}
	wantArg(t, ndr, "--csi-address", "--csi-address=/csi/csi.sock")
	wantArg(t, ndr, "--kubelet-registration-path", "--kubelet-registration-path=/var/lib/kubelet/plugins/dummy-fuse-csi/csi.sock")
	mounts := map[string]string{}
	for _, m := range ndr.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts["socket-dir"] != "/csi" || mounts["registration-dir"] != "/registration" {
		t.Errorf("node-driver-registrar mounts %v", mounts)
	}

	lp := container(t, o.ds, "liveness-probe")
	if lp.Image != "example.org/lp:v2.15.0" {
		t.Errorf("livenessprobe image %q", lp.Image)
	}
	wantArg(t, lp, "--csi-address", "--csi-address=/csi/csi.sock")
	wantArg(t, lp, "--health-port", "--health-port=9809")
	if p.Ports[0].ContainerPort != defaultHealth {
		t.Errorf("the plugin's liveness probe must call the sidecar's port %d, got %d", defaultHealth, p.Ports[0].ContainerPort)
	}
}

// TestSidecarModeNeedsImages: without the image names the rendering fails and says which value to set,
// rather than producing pods that can never pull.
func TestSidecarModeNeedsImages(t *testing.T) {
	_, err := renderChart(loadChart(t), userValues(t, "registrar.mode=sidecar"))
	if err == nil {
		t.Fatal("registrar.mode=sidecar without sidecar images rendered")
	}
	t.Logf("expected error: %v", err)
}

// leafErrors flattens a jsonschema validation error into its leaves (the causes without causes).
func leafErrors(e *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		return []*jsonschema.ValidationError{e}
	}
	var out []*jsonschema.ValidationError
	for _, c := range e.Causes {
		out = append(out, leafErrors(c)...)
	}
	return out
}

// TestSchemaRejects checks that each bad value set fails schema validation for the expected reason at the
// expected place, both through helm's own path (what `helm install` runs) and in detail.
func TestSchemaRejects(t *testing.T) {
	c := loadChart(t)
	schemaDoc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(c.Schema)))
	if err != nil {
		t.Fatalf("parse values.schema.json: %v", err)
	}
	compiler := jsonschema.NewCompiler()
	if err := compiler.AddResource("values.schema.json", schemaDoc); err != nil {
		t.Fatal(err)
	}
	schema, err := compiler.Compile("values.schema.json")
	if err != nil {
		t.Fatalf("compile values.schema.json: %v", err)
	}

	additional := func(prop string) func(kind jsonschema.ErrorKind) bool {
		return func(k jsonschema.ErrorKind) bool {
			ap, ok := k.(*kind.AdditionalProperties)
			return ok && slices.Contains(ap.Properties, prop)
		}
	}
	isEnum := func(k jsonschema.ErrorKind) bool { _, ok := k.(*kind.Enum); return ok }
	isPattern := func(k jsonschema.ErrorKind) bool { _, ok := k.(*kind.Pattern); return ok }
	isMinimum := func(k jsonschema.ErrorKind) bool { _, ok := k.(*kind.Minimum); return ok }
	isType := func(k jsonschema.ErrorKind) bool { _, ok := k.(*kind.Type); return ok }

	for _, tc := range []struct {
		set  string
		at   string // JSON pointer of the offending value's parent or itself
		want func(jsonschema.ErrorKind) bool
	}{
		{"csi.plugin.restoreMount=false", "/csi/plugin", additional("restoreMount")},
		{"kubeletdir=/var/lib/kubelet", "", additional("kubeletdir")},
		{"image.pullpolicy=Never", "/image", additional("pullpolicy")},
		{"registrar.nodeDriverRegistrar.resources.request.cpu=1", "/registrar/nodeDriverRegistrar/resources", additional("request")},
		{"tolerations[0].operater=Exists", "/tolerations/0", additional("operater")},
		{"csi.plugin.restoreStrategy=remount", "/csi/plugin/restoreStrategy", isEnum},
		{"csi.plugin.fuseMode=daemon", "/csi/plugin/fuseMode", isEnum},
		{"csi.plugin.unservedAbortAfter=30", "/csi/plugin/unservedAbortAfter", isType}, // --set makes it a number
		{"registrar.mode=kubelet", "/registrar/mode", isEnum},
		{"image.pullPolicy=Sometimes", "/image/pullPolicy", isEnum},
		{"kubeletDir=var/lib/kubelet", "/kubeletDir", isPattern},
		{"kubeletDir=/var/lib/kubelet/", "/kubeletDir", isPattern},
		{"driverName=-bad-", "/driverName", isPattern},
		{"healthPort=0", "/healthPort", isMinimum},
		{"csi.plugin.restoreMounts=yes", "/csi/plugin/restoreMounts", isType},
		{"remediation.enable=true", "/remediation", additional("enable")},
		{"remediation.enabled=yes", "/remediation/enabled", isType},
		{"remediation.grace=2 minutes", "/remediation/grace", isPattern},
		{"remediation.rateLimit=10x", "/remediation/rateLimit", isPattern},
		{"remediation.rateLimit=10", "/remediation/rateLimit", isType}, // --set makes it a number
		{"remediation.interval=0s", "/remediation/interval", func(k jsonschema.ErrorKind) bool { _, ok := k.(*kind.Not); return ok }},
		{"csi.plugin.fuseServer=bindfs", "/csi/plugin/fuseServer", isEnum},
		{"gcsfuse.fakeGCS.port=0", "/gcsfuse/fakeGCS/port", isMinimum},
		{"gcsfuse.endpoint=127.0.0.1:4443", "/gcsfuse/endpoint", isPattern},
		{"gcsfuse.metadataCacheTtlSecs=1", "/gcsfuse", additional("metadataCacheTtlSecs")},
		{"relay.backendWait=30", "/relay/backendWait", isType}, // --set makes it a number
		{"relay.backendWait=0s", "/relay/backendWait", func(k jsonschema.ErrorKind) bool { _, ok := k.(*kind.Not); return ok }},
		{"relay.serverUID=0", "/relay/serverUID", isMinimum},
		{"relay.serverUid=65534", "/relay", additional("serverUid")},
	} {
		t.Run(tc.set, func(t *testing.T) {
			vals := userValues(t, tc.set)
			// helm's path: the same call `helm install` and `helm template` make.
			if _, err := renderChart(c, vals); err == nil {
				t.Fatalf("helm rendered the chart with %s", tc.set)
			}
			coalesced, err := chartutil.CoalesceValues(c, vals)
			if err != nil {
				t.Fatal(err)
			}
			var helmErr chartutil.JSONSchemaValidationError
			if err := chartutil.ValidateAgainstSingleSchema(coalesced, c.Schema); !errors.As(err, &helmErr) {
				t.Fatalf("want a schema validation error from helm, got %v", err)
			}
			// In detail: exactly the intended violation, so the test cannot pass for another reason.
			err = schema.Validate(coalesced.AsMap())
			var verr *jsonschema.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("want a validation error, got %v", err)
			}
			for _, leaf := range leafErrors(verr) {
				at := "/" + strings.Join(leaf.InstanceLocation, "/")
				if tc.at == "" {
					at = strings.TrimSuffix(at, "/")
				}
				if at != tc.at || !tc.want(leaf.ErrorKind) {
					t.Errorf("violation at %q (%T %v), want only the one at %q", at, leaf.ErrorKind, leaf.ErrorKind, tc.at)
				}
			}
		})
	}
}

// TestSchemaAcceptsDefaults guards the other direction: the shipped values.yaml and every documented switch
// pass the schema.
func TestSchemaAcceptsDefaults(t *testing.T) {
	for _, sets := range [][]string{nil, sidecarSets, {"csi.plugin.restoreStrategy=stack", "csi.plugin.restoreMounts=false", "csi.plugin.directIO=true"},
		{"remediation.enabled=true", "remediation.dryRun=true", "remediation.grace=1h30m", "remediation.interval=500ms"},
		{"csi.plugin.fuseMode=relay", "csi.plugin.fuseServer=gcsfuse", "csi.plugin.directIO=true", "relay.backendWait=1m30s", "relay.serverUID=4242"}} {
		if _, err := renderChart(loadChart(t), userValues(t, sets...)); err != nil {
			t.Errorf("values %q: %v", sets, err)
		}
	}
}

// TestLint runs helm's own linter (what `helm lint` runs) for the default and the sidecar values.
func TestLint(t *testing.T) {
	for _, sets := range [][]string{nil, sidecarSets, {"csi.plugin.restoreStrategy=stack"}, {"remediation.enabled=true"}, {"csi.plugin.fuseServer=gcsfuse"}, {"csi.plugin.fuseServer=squashfuse"},
		{"csi.plugin.fuseMode=relay", "csi.plugin.fuseServer=gcsfuse"}} {
		linter := lint.All(".", userValues(t, sets...), releaseNamespace, false)
		for _, m := range linter.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("helm lint with %q: %v", sets, m)
			} else {
				t.Logf("helm lint with %q: %v", sets, m)
			}
		}
	}
}

// TestPackageIsClean saves the chart the way `helm package` does and checks that the archive holds the
// chart files and none of the Go test code.
func TestPackageIsClean(t *testing.T) {
	archive, err := chartutil.Save(loadChart(t), t.TempDir())
	if err != nil {
		t.Fatalf("package: %v", err)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if ext := path.Ext(h.Name); ext == ".go" || strings.Contains(h.Name, "testdata/") {
			t.Errorf("packaged chart contains %s", h.Name)
		}
	}
	for _, want := range []string{"Chart.yaml", "values.yaml", "values.schema.json", "templates/daemonset.yaml", "templates/NOTES.txt"} {
		if !slices.Contains(names, "dummy-fuse-csi/"+want) {
			t.Errorf("packaged chart lacks %s: %q", want, names)
		}
	}
	if filepath.Base(archive) != "dummy-fuse-csi-0.1.0.tgz" {
		t.Errorf("archive name %s", filepath.Base(archive))
	}
}

// TestValuesCommented: every key of values.yaml has a comment right above it (the chart's documentation),
// except the entries of free-form maps and lists (resources, nodeSelector, tolerations).
func TestValuesCommented(t *testing.T) {
	data, err := os.ReadFile("values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		indent int
		name   string
	}
	var stack []key
	lines := strings.Split(string(data), "\n")
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		freeForm := slices.ContainsFunc(stack, func(k key) bool {
			return k.name == "resources" || k.name == "nodeSelector" || k.name == "tolerations"
		})
		name, _, _ := strings.Cut(trimmed, ":")
		stack = append(stack, key{indent, name})
		if freeForm {
			continue
		}
		if i == 0 || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#") {
			t.Errorf("values.yaml:%d: %q has no comment above it", i+1, trimmed)
		}
	}
}

// TestREADME: the README's value table lists every leaf of values.yaml (maps such as resources count as one
// value), and every value it names exists.
func TestREADME(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	vals := chartutil.Values(loadChart(t).Values)
	var leaves []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			name := strings.TrimPrefix(prefix+"."+k, ".")
			if sub, ok := v.(map[string]any); ok && k != "resources" && k != "nodeSelector" {
				walk(name, sub)
				continue
			}
			leaves = append(leaves, name)
		}
	}
	walk("", vals)
	for _, name := range leaves {
		if !strings.Contains(readme, "| `"+name+"` |") {
			t.Errorf("README.md's value table lacks %s", name)
		}
	}
	for _, m := range regexp.MustCompile("`([a-zA-Z]+(?:\\.[a-zA-Z]+)+)[`=]").FindAllStringSubmatch(readme, -1) {
		name := m[1]
		// File names, labels, a PV field, and the README's deliberate example of a misspelt value.
		if path.Ext(name) == ".yaml" || path.Ext(name) == ".json" || path.Ext(name) == ".sock" ||
			strings.HasPrefix(name, "app.kubernetes") || name == "csi.driver" || name == "csi.plugin.restoreMount" {
			continue
		}
		if _, err := vals.PathValue(name); err != nil {
			if _, err := vals.Table(name); err != nil {
				t.Errorf("README.md names %s, which values.yaml does not have", name)
			}
		}
	}
}

// TestRemediation: the remediator exists only when enabled, as its own unprivileged DaemonSet with its own
// ServiceAccount and exactly the RBAC it needs, reading the plugin's socket and records where the plugin has
// them.
func TestRemediation(t *testing.T) {
	if o := render(t); o.remDS != nil || o.remSA != nil || o.remRole != nil || o.remBinding != nil {
		t.Fatal("remediator objects rendered by default")
	}
	for _, tc := range []struct {
		name                         string
		sets                         []string
		kubeletDir, driver, stateDir string
		check                        func(t *testing.T, o objects, c *corev1.Container)
	}{
		{"defaults", []string{"remediation.enabled=true"}, defaultKubelet, defaultDriver, "/var/lib/dummy-fuse-csi", func(t *testing.T, o objects, c *corev1.Container) {
			wantArg(t, c, "--grace", "--grace=2m")
			wantArg(t, c, "--rate-limit", "--rate-limit=10m")
			wantArg(t, c, "--interval", "--interval=30s")
			wantArg(t, c, "--restore-strategy", "--restore-strategy=rebind")
			wantNoArg(t, c, "--dry-run")
			if !strings.Contains(o.notes, "component=remediator") || !strings.Contains(o.notes, "reason=VolumeNotRemediated") {
				t.Errorf("NOTES.txt does not say where the remediator's decisions are:\n%s", o.notes)
			}
			if c.Resources.Limits.Memory().IsZero() {
				t.Errorf("remediator resources %+v, want a memory limit", c.Resources)
			}
		}},
		{"dry run, stack, other paths", []string{"remediation.enabled=true", "remediation.dryRun=true", "remediation.grace=90s", "csi.plugin.restoreStrategy=stack",
			"kubeletDir=/data/kubelet", "driverName=fuse.example.org", "stateDir=/data/dfc"}, "/data/kubelet", "fuse.example.org", "/data/dfc", func(t *testing.T, o objects, c *corev1.Container) {
			wantArg(t, c, "--dry-run", "--dry-run")
			wantArg(t, c, "--grace", "--grace=90s")
			wantArg(t, c, "--restore-strategy", "--restore-strategy=stack")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := render(t, tc.sets...)
			checkInvariants(t, o, tc.kubeletDir, tc.driver, tc.stateDir)
			if o.remDS == nil || o.remSA == nil || o.remRole == nil || o.remBinding == nil {
				t.Fatalf("remediator objects missing: %+v", o)
			}
			ds := o.remDS
			spec := ds.Spec.Template.Spec
			sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
			if err != nil || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
				t.Errorf("remediator selector %v does not select its pods %v", ds.Spec.Selector, ds.Spec.Template.Labels)
			}
			pluginSel, _ := metav1.LabelSelectorAsSelector(o.ds.Spec.Selector)
			if pluginSel.Matches(labels.Set(ds.Spec.Template.Labels)) || sel.Matches(labels.Set(o.ds.Spec.Template.Labels)) {
				t.Errorf("the plugin's and the remediator's selectors overlap: killing the plugin by its labels would kill the remediator")
			}
			if ds.Namespace != releaseNamespace || o.remSA.Namespace != releaseNamespace || spec.ServiceAccountName != o.remSA.Name || o.remSA.Name == o.sa.Name {
				t.Errorf("remediator ServiceAccount %s/%s, pods use %q; want its own in %s", o.remSA.Namespace, o.remSA.Name, spec.ServiceAccountName, releaseNamespace)
			}
			if o.remSA.AutomountServiceAccountToken != nil && !*o.remSA.AutomountServiceAccountToken {
				t.Error("the remediator needs its token")
			}
			b := o.remBinding
			if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != o.remRole.Name || len(b.Subjects) != 1 ||
				b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != o.remSA.Name || b.Subjects[0].Namespace != releaseNamespace {
				t.Errorf("binding %+v does not bind %s to %s", b, o.remRole.Name, o.remSA.Name)
			}
			want := map[string][]string{"pods": {"delete", "get", "list", "watch"}, "events": {"create", "patch"}, "nodes": {"get"}, "persistentvolumeclaims": {"get"},
				"apps/replicasets": {"get"}, "apps/statefulsets": {"get"}, "apps/daemonsets": {"get"}, "batch/jobs": {"get"}}
			got := map[string][]string{}
			for _, r := range o.remRole.Rules {
				if len(r.APIGroups) != 1 || len(r.ResourceNames) != 0 || len(r.NonResourceURLs) != 0 {
					t.Errorf("rule %+v: want one API group's resources, by type", r)
				}
				for _, res := range r.Resources {
					if g := r.APIGroups[0]; g != "" {
						res = g + "/" + res
					}
					got[res] = append(got[res], r.Verbs...)
				}
			}
			for res := range got {
				slices.Sort(got[res])
			}
			if len(got) != len(want) {
				t.Errorf("RBAC %v, want exactly %v", got, want)
			}
			for res, verbs := range want {
				if !slices.Equal(got[res], verbs) {
					t.Errorf("RBAC on %s: %v, want %v", res, got[res], verbs)
				}
			}

			c := container(t, ds, "remediator")
			if len(spec.Containers) != 1 || len(c.Command) != 1 || c.Command[0] != "/usr/local/bin/csi-remediate" {
				t.Fatalf("remediator containers %q, command %q args %q", containerNames(ds), c.Command, c.Args)
			}
			if c.Image != container(t, o.ds, pluginContainer).Image {
				t.Errorf("remediator image %q, want the plugin's", c.Image)
			}
			wantArg(t, c, "--node-name", "--node-name=$(NODE_NAME)")
			wantArg(t, c, "--kubelet-dir", "--kubelet-dir="+tc.kubeletDir)
			wantArg(t, c, "--state-dir", "--state-dir="+tc.stateDir)
			wantArg(t, c, "--endpoint", "--endpoint=unix:///csi/csi.sock")
			if len(c.Env) == 0 || c.Env[0].Name != "NODE_NAME" || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.FieldRef == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
				t.Errorf("NODE_NAME must come from spec.nodeName: %+v", c.Env)
			}
			sc := c.SecurityContext
			if sc == nil || (sc.Privileged != nil && *sc.Privileged) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("remediator securityContext %+v: want no privilege, no capability, a read-only root", sc)
			}
			mounts := map[string]string{"socket-dir": "/csi", "state-dir": tc.stateDir}
			if len(c.VolumeMounts) != len(mounts) {
				t.Errorf("remediator mounts %+v, want only %v", c.VolumeMounts, mounts)
			}
			for _, m := range c.VolumeMounts {
				if mounts[m.Name] != m.MountPath || !m.ReadOnly || m.MountPropagation != nil {
					t.Errorf("remediator mount %+v, want %s read-only without propagation", m, mounts[m.Name])
				}
				if got, want := volume(t, ds, m.Name).HostPath.Path, volume(t, o.ds, m.Name).HostPath.Path; got != want {
					t.Errorf("remediator volume %s is host %s, the plugin's is %s", m.Name, got, want)
				}
			}
			if !reflectEqualTolerations(spec.Tolerations, o.ds.Spec.Template.Spec.Tolerations) {
				t.Errorf("remediator tolerations %v differ from the plugin's %v: it must run wherever the plugin does", spec.Tolerations, o.ds.Spec.Template.Spec.Tolerations)
			}
			tc.check(t, o, c)
		})
	}
}

// TestRemediatorForOtherDrivers: with remediation.drivers the remediator looks after those drivers' volumes too,
// seeing kubelet's directory read-only with the node's mounts propagated in; with csi.enabled=false the chart
// installs the remediator alone, with nothing of the plugin's, and refuses a release that would install
// nothing or a remediator with nothing to look after.
func TestRemediatorForOtherDrivers(t *testing.T) {
	kubeletMount := func(t *testing.T, o objects) {
		t.Helper()
		c := container(t, o.remDS, "remediator")
		i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "kubelet-dir" })
		if i < 0 {
			t.Fatalf("remediator mounts %+v: no kubelet-dir", c.VolumeMounts)
		}
		m := c.VolumeMounts[i]
		if m.MountPath != "/data/kubelet" || !m.ReadOnly || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
			t.Errorf("kubelet-dir mount %+v, want /data/kubelet read-only with HostToContainer propagation", m)
		}
		if v := volume(t, o.remDS, "kubelet-dir"); v.HostPath == nil || v.HostPath.Path != "/data/kubelet" {
			t.Errorf("kubelet-dir volume %+v, want the host's /data/kubelet", v)
		}
		wantArg(t, c, "--kubelet-dir", "--kubelet-dir=/data/kubelet")
		if got := argsWithFlag(c, "--driver"); !slices.Equal(got, []string{"--driver=ru.yandex.s3.csi", "--driver=fuse.example.org"}) {
			t.Errorf("--driver args %q, want one per remediation.drivers entry", got)
		}
	}
	drivers := []string{"remediation.enabled=true", "kubeletDir=/data/kubelet", "remediation.drivers={ru.yandex.s3.csi,fuse.example.org}"}

	both := render(t, drivers...)
	kubeletMount(t, both)
	wantArg(t, container(t, both.remDS, "remediator"), "--state-dir", "--state-dir=/var/lib/dummy-fuse-csi")

	out, err := renderChart(loadChart(t), userValues(t, append(drivers, "csi.enabled=false")...))
	if err != nil {
		t.Fatalf("the remediator alone: %v", err)
	}
	alone := decodeAll(t, out)
	if alone.ds != nil || alone.driver != nil || alone.sa != nil || alone.keeperDS != nil || alone.serverSpec != nil {
		t.Errorf("csi.enabled=false rendered the plugin's objects: %+v", alone)
	}
	if alone.remDS == nil || alone.remRole == nil || alone.remBinding == nil || alone.remSA == nil {
		t.Fatalf("csi.enabled=false: the remediator's objects missing: %+v", alone)
	}
	kubeletMount(t, alone)
	c := container(t, alone.remDS, "remediator")
	for _, flag := range []string{"--state-dir", "--endpoint", "--restore-strategy"} {
		wantNoArg(t, c, flag)
	}
	if len(c.VolumeMounts) != 1 {
		t.Errorf("remediator alone mounts %+v, want kubelet-dir only", c.VolumeMounts)
	}
	if !strings.Contains(alone.notes, "ru.yandex.s3.csi, fuse.example.org") {
		t.Errorf("NOTES.txt does not say which drivers the remediator looks after:\n%s", alone.notes)
	}

	for _, sets := range [][]string{{"csi.enabled=false"}, {"csi.enabled=false", "remediation.enabled=true"}} {
		if _, err := renderChart(loadChart(t), userValues(t, sets...)); err == nil || !strings.Contains(err.Error(), "remediation.drivers") {
			t.Errorf("%q: %v, want a refusal naming remediation.drivers", sets, err)
		}
	}
}

func reflectEqualTolerations(a, b []corev1.Toleration) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.Toleration) bool { return x.MatchToleration(&y) })
}

// TestFuseModeSidecarNeedsPodInfo: the sidecar FUSE mode finds the pod's socket volume by the pod UID that
// kubelet only sends with podInfoOnMount; the chart refuses the combination that cannot work.
func TestFuseModeSidecarNeedsPodInfo(t *testing.T) {
	_, err := renderChart(loadChart(t), userValues(t, "csi.plugin.fuseMode=sidecar", "csiDriver.podInfoOnMount=false"))
	if err == nil || !strings.Contains(err.Error(), "podInfoOnMount") {
		t.Fatalf("fuseMode=sidecar without podInfoOnMount: %v, want a refusal naming podInfoOnMount", err)
	}
}

// TestSidecarKeepFD: sidecar.keepFd reaches the plugin only in the sidecar mode.
func TestSidecarKeepFD(t *testing.T) {
	wantArg(t, container(t, render(t, "csi.plugin.fuseMode=sidecar", "sidecar.keepFd=true").ds, pluginContainer), "--sidecar-keep-fd", "--sidecar-keep-fd")
	wantNoArg(t, container(t, render(t, "csi.plugin.fuseMode=sidecar").ds, pluginContainer), "--sidecar-keep-fd")
	wantNoArg(t, container(t, render(t, "csi.plugin.fuseMode=child", "sidecar.keepFd=true").ds, pluginContainer), "--sidecar-keep-fd")
}

// TestUnservedAbortAfter: the bound on requests waiting on a kept connection reaches the plugin in the modes
// that keep connections (keeper, sidecar with keepFd), and only there.
func TestUnservedAbortAfter(t *testing.T) {
	const flag = "--unserved-abort-after"
	wantArg(t, container(t, render(t, "csi.plugin.fuseMode=keeper").ds, pluginContainer), flag, flag+"=30s")
	wantArg(t, container(t, render(t, "csi.plugin.fuseMode=keeper", "csi.plugin.unservedAbortAfter=2m").ds, pluginContainer), flag, flag+"=2m")
	wantArg(t, container(t, render(t, "csi.plugin.fuseMode=sidecar", "sidecar.keepFd=true", "csi.plugin.unservedAbortAfter=0s").ds, pluginContainer), flag, flag+"=0s")
	wantNoArg(t, container(t, render(t, "csi.plugin.fuseMode=sidecar").ds, pluginContainer), flag)
	wantNoArg(t, container(t, render(t, "csi.plugin.fuseMode=child").ds, pluginContainer), flag)
}

// TestKeeperMode: fuseMode=keeper adds the keeper DaemonSet: unprivileged as the user the plugin accepts, the
// plugin's socket directory and nothing else of the host, its own selector, a rolling update that starts the
// new keeper before the old one stops; and only in that mode.
func TestKeeperMode(t *testing.T) {
	for _, mode := range []string{"child", "sidecar"} {
		if o := render(t, "csi.plugin.fuseMode="+mode); o.keeperDS != nil {
			t.Errorf("a keeper DaemonSet in fuseMode %s", mode)
		}
	}
	o := render(t, "csi.plugin.fuseMode=keeper", "keeper.runAsUser=4242", "keeper.runAsGroup=4343", "keeper.readLatency=500ms", "keeper.volumesPerServer=8",
		"csi.plugin.directIO=true", "image.tag=v1", "keeper.imageTag=v2")
	checkInvariants(t, o, defaultKubelet, defaultDriver, "/var/lib/dummy-fuse-csi")
	plugin := container(t, o.ds, pluginContainer)
	wantArg(t, plugin, "--fuse-mode", "--fuse-mode=keeper")
	wantArg(t, plugin, "--keeper-uid", "--keeper-uid=4242")
	wantArg(t, plugin, "--keeper-gid", "--keeper-gid=4343")
	wantNoArg(t, plugin, "--fuse-direct-io") // the keeper's servers read directly, not the plugin's (none)
	ds := o.keeperDS
	if ds == nil {
		t.Fatal("no keeper DaemonSet in fuseMode keeper")
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("keeper selector %v does not select its pods %v", ds.Spec.Selector, ds.Spec.Template.Labels)
	}
	pluginSel, _ := metav1.LabelSelectorAsSelector(o.ds.Spec.Selector)
	if pluginSel.Matches(labels.Set(ds.Spec.Template.Labels)) || sel.Matches(labels.Set(o.ds.Spec.Template.Labels)) {
		t.Error("the plugin's and the keeper's selectors overlap: killing the plugin by its labels would kill the keeper")
	}
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 1 ||
		ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("keeper update strategy %+v: want a surge of 1 and none unavailable", ds.Spec.UpdateStrategy)
	}
	spec := ds.Spec.Template.Spec
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the keeper mounts an API token it never uses")
	}
	c := container(t, ds, "keeper")
	if c.Image != "dummy-fuse-csi:v2" || plugin.Image != "dummy-fuse-csi:v1" {
		t.Errorf("images: keeper %q, plugin %q; want keeper.imageTag for the keeper only", c.Image, plugin.Image)
	}
	if !slices.Equal(c.Command, []string{"/usr/local/bin/csi-plugin"}) || len(c.Args) == 0 || c.Args[0] != "keeper" {
		t.Errorf("keeper command %q args %q", c.Command, c.Args)
	}
	wantArg(t, c, "--plugin-socket", "--plugin-socket=/csi/keeper.sock")
	wantArg(t, c, "--read-latency", "--read-latency=500ms")
	wantArg(t, c, "--volumes-per-server", "--volumes-per-server=8")
	wantArg(t, c, "--fuse-direct-io", "--fuse-direct-io")
	sc := c.SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 4242 || sc.RunAsGroup == nil || *sc.RunAsGroup != 4343 || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		(sc.Privileged != nil && *sc.Privileged) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("keeper securityContext %+v: want user 4242, group 4343, no privilege, no capability", sc)
	}
	// By default the keeper runs as the IDs the plugin expects without flags, which nothing else uses.
	d := render(t, "csi.plugin.fuseMode=keeper")
	dsc := container(t, d.keeperDS, "keeper").SecurityContext
	if *dsc.RunAsUser == 65534 || *dsc.RunAsGroup == 65534 {
		t.Errorf("default keeper user %d group %d: nobody is shared with too many images", *dsc.RunAsUser, *dsc.RunAsGroup)
	}
	wantArg(t, container(t, d.ds, pluginContainer), "--keeper-uid", fmt.Sprintf("--keeper-uid=%d", *dsc.RunAsUser))
	wantArg(t, container(t, d.ds, pluginContainer), "--keeper-gid", fmt.Sprintf("--keeper-gid=%d", *dsc.RunAsGroup))
	for _, m := range c.VolumeMounts {
		v := volume(t, ds, m.Name)
		switch {
		case m.Name == "socket-dir":
			if m.MountPath != "/csi" || v.HostPath == nil || v.HostPath.Path != volume(t, o.ds, "socket-dir").HostPath.Path {
				t.Errorf("keeper socket dir %+v / %+v, want the plugin's at /csi", m, v)
			}
		case v.HostPath != nil:
			t.Errorf("keeper mounts host path %s: it needs the plugin's socket directory only", v.HostPath.Path)
		}
	}
	if !reflectEqualTolerations(spec.Tolerations, o.ds.Spec.Template.Spec.Tolerations) {
		t.Errorf("keeper tolerations %v differ from the plugin's: it must run wherever the plugin does", spec.Tolerations)
	}
}

// TestRelayKeeperMode: fuseMode=relay-keeper is the keeper mode's two DaemonSets with the relay flags: the plugin
// accepts the keeper's user and mounts the backends in its private relay directory; the keeper runs the real
// server with its settings (gcsfuse: the fake GCS server in the keeper's pod, not the plugin's), keeps its relays'
// node tables in the socket directory (which outlives it) and rolls without a surge, since two keepers' relays
// cannot serve one connection.
func TestRelayKeeperMode(t *testing.T) {
	for _, server := range []string{"dummy-fuse", "gcsfuse", "squashfuse"} {
		t.Run(server, func(t *testing.T) {
			o := render(t, "csi.plugin.fuseMode=relay-keeper", "csi.plugin.fuseServer="+server, "keeper.runAsUser=4242", "keeper.runAsGroup=4343",
				"relay.backendWait=9s", "gcsfuse.fakeGCS.port=5443", "gcsfuse.metadataCacheTTLSecs=7")
			checkInvariants(t, o, defaultKubelet, defaultDriver, "/var/lib/dummy-fuse-csi")
			plugin := container(t, o.ds, pluginContainer)
			wantArg(t, plugin, "--fuse-mode", "--fuse-mode=relay-keeper")
			wantArg(t, plugin, "--keeper-uid", "--keeper-uid=4242")
			wantArg(t, plugin, "--keeper-gid", "--keeper-gid=4343")
			wantArg(t, plugin, "--relay-dir", "--relay-dir=/relay")
			wantArg(t, plugin, "--relay-backend-wait", "--relay-backend-wait=9s")
			wantNoArg(t, plugin, "--relay-server-uid") // the keeper runs the server, as its own user
			if n := len(o.ds.Spec.Template.Spec.InitContainers); n != 0 {
				t.Errorf("plugin pod: %d init containers, want none (the keeper runs the real server)", n)
			}
			if v := volume(t, o.ds, "relay-dir"); v.EmptyDir == nil {
				t.Errorf("relay-dir %+v: want the plugin pod's emptyDir", v)
			}
			ds := o.keeperDS
			if ds == nil {
				t.Fatal("no keeper DaemonSet in fuseMode relay-keeper")
			}
			ru := ds.Spec.UpdateStrategy.RollingUpdate
			if ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 1 {
				t.Errorf("keeper update strategy %+v: want no surge (one relay per connection)", ds.Spec.UpdateStrategy)
			}
			c := container(t, ds, "keeper")
			// Its root is read-only: the real server's /tmp (gcsfuse rewrites a file there that it cannot stream).
			tmp := false
			for _, m := range c.VolumeMounts {
				tmp = tmp || (m.MountPath == "/tmp" && volume(t, ds, m.Name).EmptyDir != nil)
			}
			if !tmp {
				t.Errorf("keeper mounts %+v: want an emptyDir at /tmp for the real server", c.VolumeMounts)
			}
			wantArg(t, c, "--relay-node-dir", "--relay-node-dir=/csi/relay-nodes")
			wantArg(t, c, "--relay-backend-wait", "--relay-backend-wait=9s")
			wantArg(t, c, "--relay-server", "--relay-server="+server)
			wantArg(t, c, "--relay-server-path", "--relay-server-path=/usr/local/bin/"+server)
			want := map[string][]string{
				"dummy-fuse": nil,
				"gcsfuse":    {"--relay-server-opt=endpoint=http://127.0.0.1:5443/storage/v1/", "--relay-server-opt=metadata-cache-ttl-secs=7"},
				"squashfuse": {"--relay-server-opt=image=/usr/local/share/dummy-fuse-csi/tree.squashfs"},
			}[server]
			if got := argsWithFlag(c, "--relay-server-opt"); !slices.Equal(got, want) {
				t.Errorf("keeper --relay-server-opt %q, want %q", got, want)
			}
			wantNoArg(t, c, "--relay-server-arg") // none unless given
			up := container(t, render(t, "csi.plugin.fuseMode=relay-keeper", "csi.plugin.fuseServer="+server,
				"keeper.relayServerArgs={--log-severity=warning,-s}").keeperDS, "keeper")
			if got, want := argsWithFlag(up, "--relay-server-arg"), []string{"--relay-server-arg=--log-severity=warning", "--relay-server-arg=-s"}; !slices.Equal(got, want) {
				t.Errorf("keeper.relayServerArgs: keeper --relay-server-arg %q, want %q", got, want)
			}
			var inits []string
			for _, ic := range ds.Spec.Template.Spec.InitContainers {
				inits = append(inits, ic.Name)
			}
			if wantInits := map[bool][]string{true: {"fake-gcs"}}[server == "gcsfuse"]; !slices.Equal(inits, wantInits) {
				t.Errorf("keeper pod init containers %q, want %q", inits, wantInits)
			}
			if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "socket-dir" && m.MountPath == "/csi" }) {
				t.Errorf("keeper mounts %+v: want the socket directory at /csi, where the node directory /csi/relay-nodes lives", c.VolumeMounts)
			}
		})
	}
	// The keeper mode itself is unchanged: no relay flags, a surge of 1.
	c := container(t, render(t, "csi.plugin.fuseMode=keeper").keeperDS, "keeper")
	wantNoArg(t, c, "--relay-node-dir")
	wantNoArg(t, c, "--relay-server")
}

// TestDefaultImageIsWhatTheClusterLoads: `helm install` with the chart's defaults and `kubectl apply -f
// manifests/` must run what `make image` built. Both name dummy-fuse-csi:<appVersion>; the cluster scripts
// (hack/cluster/lib.sh import_images) tag the last build with the appVersion they read from Chart.yaml, and
// NOTES.txt says how to get that tag where the image is loaded by hand.
func TestDefaultImageIsWhatTheClusterLoads(t *testing.T) {
	app := loadChart(t).Metadata.AppVersion
	want := "dummy-fuse-csi:" + app
	o := render(t)
	if got := container(t, o.ds, pluginContainer).Image; got != want {
		t.Fatalf("default image %q, want %q", got, want)
	}
	for _, line := range []string{
		"The image " + want + " must be on every node",
		"`make cluster-up`, `make cluster-load-images` and `make kind-up` put the last `make image` there under this tag",
		"make image VERSION=" + app + "     # _output/images/dummy-fuse-csi-" + app + ".tar",
	} {
		if !strings.Contains(o.notes, line) {
			t.Errorf("NOTES.txt lacks %q:\n%s", line, o.notes)
		}
	}
	if o := render(t, "image.tag=v9"); strings.Contains(o.notes, "make image VERSION=") ||
		!strings.Contains(o.notes, "manifests/ use the image "+want) {
		t.Errorf("with image.tag=v9, NOTES.txt should say that manifests/ use %s and not how to build the default tag:\n%s", want, o.notes)
	}

	// manifests/ name the same image everywhere.
	files, err := filepath.Glob("../manifests/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("manifests: %v (%d files)", err, len(files))
	}
	imageLine := regexp.MustCompile(`(?m)^\s*image:\s*(\S+)`)
	seen := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range imageLine.FindAllStringSubmatch(string(data), -1) {
			seen++
			if m[1] != want {
				t.Errorf("%s: image %s, want the chart's default %s", f, m[1], want)
			}
		}
	}
	if seen == 0 {
		t.Error("no image in manifests/*.yaml: the pattern is stale")
	}

	// The cluster scripts read the same appVersion and tag the name containerd stores.
	testenv.Integration(t, "runs hack/cluster/lib.sh with bash")
	out, err := exec.Command("bash", "-c", `source ../hack/cluster/lib.sh && chart_app_version && containerd_ref dummy-fuse-csi:`+app).CombinedOutput()
	if err != nil {
		t.Fatalf("hack/cluster/lib.sh: %v\n%s", err, out)
	}
	if got, wantOut := string(out), app+"\ndocker.io/library/"+want+"\n"; got != wantOut {
		t.Errorf("hack/cluster/lib.sh chart_app_version, containerd_ref: %q, want %q", got, wantOut)
	}
}

// TestClusterDownKnowsTheStateDirs: cluster-down removes the chart's state dirs that cluster-up did not find;
// hack/cluster/lib.sh must name the chart's default stateDir and the scenario backend's.
func TestClusterDownKnowsTheStateDirs(t *testing.T) {
	testenv.Integration(t, "runs hack/cluster/lib.sh with bash")
	out, err := exec.Command("bash", "-c", `source ../hack/cluster/lib.sh && printf '%s\n' "${CHART_STATE_DIRS[@]}"`).CombinedOutput()
	if err != nil {
		t.Fatalf("hack/cluster/lib.sh: %v\n%s", err, out)
	}
	dirs := strings.Fields(string(out))
	want := []string{loadChart(t).Values["stateDir"].(string)}
	kube, err := os.ReadFile("../scenarios/kube/kube.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`DefaultStateDir\s*=\s*"([^"]+)"`).FindSubmatch(kube)
	if m == nil {
		t.Fatal("scenarios/kube/kube.go: no DefaultStateDir constant")
	}
	want = append(want, string(m[1]))
	if !slices.Equal(dirs, want) {
		t.Errorf("CHART_STATE_DIRS %q, want %q", dirs, want)
	}
}

// TestFuseServer: csi.plugin.fuseServer=gcsfuse gives the plugin gcsfuse's flags and the fake GCS server it
// reads as a native sidecar that serves before the plugin starts, on the pod's loopback at the host:port that
// is both gcsfuse's endpoint and the fake's public host; squashfuse gets its image; dummy-fuse, the default,
// adds nothing; the keeper mode and direct I/O refuse the real servers.
func TestFuseServer(t *testing.T) {
	d := render(t)
	wantNoArg(t, container(t, d.ds, pluginContainer), "--fuse-server")
	wantNoArg(t, container(t, d.ds, pluginContainer), "--fuse-server-opt")
	if n := len(d.ds.Spec.Template.Spec.InitContainers); n != 0 {
		t.Errorf("dummy-fuse: %d init containers, want none", n)
	}

	for _, mode := range []string{"child", "sidecar", "relay"} {
		t.Run(mode, func(t *testing.T) {
			o := render(t, "csi.plugin.fuseServer=gcsfuse", "csi.plugin.fuseMode="+mode, "gcsfuse.fakeGCS.port=5443", "gcsfuse.metadataCacheTTLSecs=7")
			checkInvariants(t, o, defaultKubelet, defaultDriver, "/var/lib/dummy-fuse-csi")
			p := container(t, o.ds, pluginContainer)
			wantArg(t, p, "--fuse-server", "--fuse-server=gcsfuse")
			wantArg(t, p, "--fuse-server-path", "--fuse-server-path=/usr/local/bin/gcsfuse")
			if got, want := argsWithFlag(p, "--fuse-server-opt"), []string{
				"--fuse-server-opt=endpoint=http://127.0.0.1:5443/storage/v1/", "--fuse-server-opt=metadata-cache-ttl-secs=7",
			}; !slices.Equal(got, want) {
				t.Errorf("--fuse-server-opt %q, want %q", got, want)
			}
			spec := o.ds.Spec.Template.Spec
			if spec.HostNetwork {
				t.Error("hostNetwork: the fake GCS server on 127.0.0.1 would be the node's")
			}
			if len(spec.InitContainers) != 1 {
				t.Fatalf("init containers %+v, want the fake GCS server", spec.InitContainers)
			}
			f := spec.InitContainers[0]
			if f.Name != "fake-gcs" || f.RestartPolicy == nil || *f.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				t.Errorf("init container %s restartPolicy %v: want the native sidecar fake-gcs", f.Name, f.RestartPolicy)
			}
			if f.Image != p.Image || !slices.Equal(f.Command, []string{"/usr/local/bin/fake-gcs-server"}) {
				t.Errorf("fake GCS server image %q command %q: want the plugin's image and fake-gcs-server", f.Image, f.Command)
			}
			for _, a := range []string{"-backend=memory", "-scheme=http", "-port=5443", "-public-host=127.0.0.1:5443", "-data=/usr/local/share/dummy-fuse-csi/gcs"} {
				if !slices.Contains(f.Args, a) {
					t.Errorf("fake GCS server args %q lack %s", f.Args, a)
				}
			}
			sp := f.StartupProbe
			if sp == nil || sp.HTTPGet == nil || sp.HTTPGet.Path != "/storage/v1/b/dummy-fuse-csi/o" || sp.HTTPGet.Port.String() != "fake-gcs" ||
				len(f.Ports) != 1 || f.Ports[0].Name != "fake-gcs" || f.Ports[0].ContainerPort != 5443 {
				t.Errorf("fake GCS server startup probe %+v ports %+v: want its bucket listed on its port", sp, f.Ports)
			}
			sc := f.SecurityContext
			if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("fake GCS server securityContext %+v: want non-root, read-only, no capability", sc)
			}
			if len(f.VolumeMounts) != 0 {
				t.Errorf("fake GCS server mounts %+v: it needs nothing of the host", f.VolumeMounts)
			}
		})
	}

	// gcsfuse.endpoint: a GCS server outside the pods, and no fake beside gcsfuse, in the plugin's pod or the keeper's.
	for _, mode := range []string{"child", "relay", "relay-keeper"} {
		const ep = "http://10.244.0.1:18337/storage/v1/"
		o := render(t, "csi.plugin.fuseServer=gcsfuse", "csi.plugin.fuseMode="+mode, "gcsfuse.endpoint="+ep)
		flag, ps := "--fuse-server-opt", o.ds.Spec.Template.Spec
		if mode == "relay-keeper" {
			flag, ps = "--relay-server-opt", o.keeperDS.Spec.Template.Spec
		}
		server := ps.Containers[0]
		if got := argsWithFlag(&server, flag); !slices.Contains(got, flag+"=endpoint="+ep) {
			t.Errorf("%s: %s %q, want endpoint %s", mode, flag, got, ep)
		}
		for _, pod := range []corev1.PodSpec{o.ds.Spec.Template.Spec, ps} {
			for _, c := range pod.InitContainers {
				if c.Name == "fake-gcs" {
					t.Errorf("%s with gcsfuse.endpoint: a fake GCS server beside gcsfuse", mode)
				}
			}
		}
	}

	// squashfuse reads the image's squashfs image and needs nothing beside it.
	for _, mode := range []string{"child", "sidecar", "relay"} {
		o := render(t, "csi.plugin.fuseServer=squashfuse", "csi.plugin.fuseMode="+mode)
		checkInvariants(t, o, defaultKubelet, defaultDriver, "/var/lib/dummy-fuse-csi")
		p := container(t, o.ds, pluginContainer)
		wantArg(t, p, "--fuse-server", "--fuse-server=squashfuse")
		wantArg(t, p, "--fuse-server-path", "--fuse-server-path=/usr/local/bin/squashfuse")
		wantArg(t, p, "--fuse-server-opt", "--fuse-server-opt=image=/usr/local/share/dummy-fuse-csi/tree.squashfs")
		if n := len(o.ds.Spec.Template.Spec.InitContainers); n != 0 {
			t.Errorf("squashfuse, %s mode: %d init containers, want none", mode, n)
		}
	}

	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"csi.plugin.fuseServer=gcsfuse", "csi.plugin.fuseMode=keeper"}, "keeper"},
		{[]string{"csi.plugin.fuseServer=gcsfuse", "csi.plugin.directIO=true"}, "direct-I/O"},
		{[]string{"csi.plugin.fuseServer=gcsfuse", "gcsfuse.fakeGCS.port=9809"}, "healthPort"},
		{[]string{"csi.plugin.fuseServer=squashfuse", "csi.plugin.fuseMode=keeper"}, "keeper"},
		{[]string{"csi.plugin.fuseServer=bindfs"}, "fuseServer"},
	} {
		if _, err := renderChart(loadChart(t), userValues(t, tc.sets...)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %q: %v, want a refusal naming %s", tc.sets, err, tc.want)
		}
	}
}

// rcloneSpec is a server spec as an operator gives it (docs/servers/rclone.yaml's shape).
const rcloneSpec = `name: rclone
executable: rclone
args: ["mount2", "{remote}", "{mountpoint}", "--read-only"]
servesFD: true
settings:
  - name: remote
    required: true
`

// TestUserServer: fuseServer.spec runs the operator's server from its image in every placement that can: the
// spec reaches the plugin (and the relay-keeper mode's keeper) as a ConfigMap of the chart's, an init container of
// the operator's image copies the files into an emptyDir of the pod that runs the server, and the flags name
// them; a placement the server cannot use, or missing values, are refused by name.
func TestUserServer(t *testing.T) {
	user := []string{"fuseServer.image=example.invalid/rclone:1.76", "fuseServer.files={/usr/local/bin/rclone,/srv/dfc}",
		"fuseServer.settings.remote=/usr/local/share/dummy-fuse-csi/server/dfc"}
	const dir, specFile = "/usr/local/share/dummy-fuse-csi/server", "/etc/dummy-fuse-csi/server/spec.yaml"
	for _, mode := range []string{"child", "relay", "relay-keeper"} {
		t.Run(mode, func(t *testing.T) {
			vals := userValues(t, slices.Concat(user, []string{"csi.plugin.fuseMode=" + mode})...)
			vals["fuseServer"].(map[string]any)["spec"] = rcloneSpec
			out, err := renderChart(loadChart(t), vals)
			if err != nil {
				t.Fatal(err)
			}
			o := decode(t, out)
			checkInvariants(t, o, defaultKubelet, defaultDriver, "/var/lib/dummy-fuse-csi")
			if o.serverSpec == nil || o.serverSpec.Data["spec.yaml"] != rcloneSpec {
				t.Fatalf("server spec ConfigMap %+v, want the spec as given", o.serverSpec)
			}
			holders := map[*appsv1.DaemonSet]string{o.ds: "fuse-server"}
			if mode == "relay-keeper" {
				holders[o.keeperDS] = "relay-server"
			}
			for ds, prefix := range holders {
				spec := ds.Spec.Template.Spec
				c := spec.Containers[0]
				wantArg(t, &c, "--"+prefix, "--"+prefix+"="+specFile)
				wantArg(t, &c, "--"+prefix+"-path", "--"+prefix+"-path="+dir+"/rclone")
				wantArg(t, &c, "--"+prefix+"-opt", "--"+prefix+"-opt=remote="+dir+"/dfc")
				if len(spec.InitContainers) != 1 || spec.InitContainers[0].Image != "example.invalid/rclone:1.76" ||
					!slices.Equal(spec.InitContainers[0].Command, []string{"cp", "-RL", "/usr/local/bin/rclone", "/srv/dfc", dir + "/"}) {
					t.Errorf("%s: init containers %+v, want the copy out of the operator's image", ds.Name, spec.InitContainers)
				}
				var mounts []string
				for _, m := range c.VolumeMounts {
					if m.MountPath == dir || m.MountPath == "/etc/dummy-fuse-csi/server" {
						mounts = append(mounts, m.Name)
						if !m.ReadOnly {
							t.Errorf("%s: %s mounted writable", ds.Name, m.MountPath)
						}
					}
				}
				if !slices.Equal(mounts, []string{"server-files", "server-spec"}) {
					t.Errorf("%s: server mounts %q, want the files and the spec", ds.Name, mounts)
				}
			}
			if mode == "relay-keeper" {
				k := o.keeperDS.Spec.Template.Spec
				if sc := k.InitContainers[0].SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != *k.Containers[0].SecurityContext.RunAsUser {
					t.Errorf("keeper's copy runs as %+v, want the keeper's user (who runs the server)", sc)
				}
			}
		})
	}
	for _, tc := range []struct {
		mode, spec string
		sets       []string
		want       string
	}{
		{"keeper", rcloneSpec, user, "keeper"},
		{"relay-keeper", "name: s3fs\nexecutable: s3fs\nargs: [\"{mountpoint}\"]\n", user, "nor ask fusermount"},
		{"sidecar", "name: s3fs\nexecutable: s3fs\nargs: [\"{mountpoint}\"]\nfusermount: true\n", user, "servesFD"},
		{"sidecar", "name: s3fs\nexecutable: s3fs\nargs: [\"{mountpoint}\"]\n", user, "servesFD"},
		{"child", rcloneSpec, user[:1], "fuseServer.files"},
		{"child", rcloneSpec, user[1:], "fuseServer.image"},
		{"child", "name: x\n", user, "no executable"},
	} {
		vals := userValues(t, slices.Concat(tc.sets, []string{"csi.plugin.fuseMode=" + tc.mode})...) // not append: tc.sets may be a prefix of user
		if vals["fuseServer"] == nil {
			vals["fuseServer"] = map[string]any{}
		}
		vals["fuseServer"].(map[string]any)["spec"] = tc.spec
		if _, err := renderChart(loadChart(t), vals); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s mode, spec %q, values %q: %v, want a refusal naming %s", tc.mode, tc.spec, tc.sets, err, tc.want)
		}
	}
	// A server that cannot serve a passed connection mounts its directory itself: the child and relay modes.
	for _, mode := range []string{"child", "relay"} {
		vals := userValues(t, slices.Concat(user, []string{"csi.plugin.fuseMode=" + mode})...)
		vals["fuseServer"].(map[string]any)["spec"] = "name: s3fs\nexecutable: s3fs\nargs: [\"{mountpoint}\"]\n"
		out, err := renderChart(loadChart(t), vals)
		if err != nil {
			t.Errorf("%s mode, a self-mounting server: %v", mode, err)
			continue
		}
		wantArg(t, container(t, decode(t, out).ds, pluginContainer), "--fuse-server-path", "--fuse-server-path=/usr/local/share/dummy-fuse-csi/server/s3fs")
	}
	// One that asks fusermount for its connection runs in the keeper of relay-keeper too (its stand-in answers).
	vals := userValues(t, slices.Concat(user, []string{"csi.plugin.fuseMode=relay-keeper"})...)
	vals["fuseServer"].(map[string]any)["spec"] = "name: s3fs\nexecutable: s3fs\nargs: [\"{mountpoint}\"]\nfusermount: true\n"
	if out, err := renderChart(loadChart(t), vals); err != nil {
		t.Errorf("relay-keeper mode, a server that asks fusermount: %v", err)
	} else if o := decode(t, out); o.keeperDS == nil {
		t.Error("relay-keeper mode, a server that asks fusermount: no keeper DaemonSet")
	} else {
		wantArg(t, container(t, o.keeperDS, "keeper"), "--relay-server-path", "--relay-server-path=/usr/local/share/dummy-fuse-csi/server/s3fs")
		// The keeper's root filesystem is read-only: the server gets a writable /tmp of the pod's own.
		tmp := false
		for _, m := range container(t, o.keeperDS, "keeper").VolumeMounts {
			tmp = tmp || (m.MountPath == "/tmp" && !m.ReadOnly)
		}
		if !tmp {
			t.Error("relay-keeper mode with the operator's server: the keeper has no writable /tmp")
		}
	}
	// A dynamic executable's loader is copied too and mounted where its ELF header names it, in every pod that
	// runs or checks the server; a loader path that is not one is refused.
	const loader = "/lib64/ld-linux-x86-64.so.2"
	vals["fuseServer"].(map[string]any)["interpreter"] = loader
	out, err := renderChart(loadChart(t), vals)
	if err != nil {
		t.Fatalf("fuseServer.interpreter: %v", err)
	}
	o := decode(t, out)
	for _, ds := range []*appsv1.DaemonSet{o.ds, o.keeperDS} {
		spec := ds.Spec.Template.Spec
		if cmd := spec.InitContainers[0].Command; len(cmd) < 2 || cmd[len(cmd)-2] != loader {
			t.Errorf("%s: copy %q, want the loader copied with the files", ds.Name, cmd)
		}
		found := false
		for _, m := range spec.Containers[0].VolumeMounts {
			if m.MountPath == loader {
				found = m.Name == "server-files" && m.SubPath == "ld-linux-x86-64.so.2" && m.ReadOnly
			}
		}
		if !found {
			t.Errorf("%s: no read-only mount of the copied loader at %s", ds.Name, loader)
		}
	}
	for _, bad := range []string{"lib64/ld.so", "/usr/local/share/dummy-fuse-csi/server/ld.so"} {
		vals["fuseServer"].(map[string]any)["interpreter"] = bad
		if _, err := renderChart(loadChart(t), vals); err == nil || !strings.Contains(err.Error(), "interpreter") {
			t.Errorf("fuseServer.interpreter %q: %v, want a refusal", bad, err)
		}
	}
}

// TestRelayMode: fuseMode=relay gives the plugin its relay flags and a directory of the pod's own for the private
// backend mounts: an emptyDir mounted without propagation, outside the kubelet directories the plugin shares
// with the node (so a mount there never reaches the node's mount table), the real server as a non-root user,
// every FUSE server behind the relay, and direct I/O as the relay's; none of it in another mode.
func TestRelayMode(t *testing.T) {
	for _, server := range []string{"dummy-fuse", "gcsfuse", "squashfuse"} {
		t.Run(server, func(t *testing.T) {
			o := render(t, "csi.plugin.fuseMode=relay", "csi.plugin.fuseServer="+server, "csi.plugin.directIO=true",
				"relay.backendWait=5s", "relay.serverUID=4242")
			checkInvariants(t, o, defaultKubelet, defaultDriver, "/var/lib/dummy-fuse-csi")
			p := container(t, o.ds, pluginContainer)
			wantArg(t, p, "--fuse-mode", "--fuse-mode=relay")
			wantArg(t, p, "--relay-backend-wait", "--relay-backend-wait=5s")
			wantArg(t, p, "--relay-server-uid", "--relay-server-uid=4242")
			wantArg(t, p, "--fuse-direct-io", "--fuse-direct-io")
			wantNoArg(t, p, "--keeper-uid")
			if server != "dummy-fuse" {
				wantArg(t, p, "--fuse-server", "--fuse-server="+server)
			}
			if o.keeperDS != nil {
				t.Error("a keeper DaemonSet in the relay mode: the plugin runs the relays")
			}
			dirs := argsWithFlag(p, "--relay-dir")
			if len(dirs) != 1 {
				t.Fatalf("--relay-dir %q, want one", dirs)
			}
			dir := strings.TrimPrefix(dirs[0], "--relay-dir=")
			var m *corev1.VolumeMount
			for i := range p.VolumeMounts {
				vm := &p.VolumeMounts[i]
				if vm.MountPath == dir {
					m = vm
				}
				// No mount the plugin shares with the node may hold the relay's directory.
				if vm.MountPropagation != nil && *vm.MountPropagation == corev1.MountPropagationBidirectional &&
					(dir == vm.MountPath || strings.HasPrefix(dir, vm.MountPath+"/")) {
					t.Errorf("relay dir %s lies in %s, shared with the node (%s)", dir, vm.Name, vm.MountPath)
				}
			}
			if m == nil {
				t.Fatalf("relay dir %s is no mount of the plugin container", dir)
			}
			if m.MountPropagation != nil && *m.MountPropagation != corev1.MountPropagationNone {
				t.Errorf("relay dir mount propagation %s, want none: the backend mounts must stay in the plugin's namespace", *m.MountPropagation)
			}
			if v := volume(t, o.ds, m.Name); v.EmptyDir == nil {
				t.Errorf("relay dir volume %s: %+v, want an emptyDir of the pod (no host path)", m.Name, v.VolumeSource)
			}
		})
	}
	for _, mode := range []string{"relay", "relay-keeper"} {
		o := render(t, "csi.plugin.fuseMode="+mode, "csi.plugin.fuseServer=gcsfuse", "relay.writable=true")
		wantArg(t, container(t, o.ds, pluginContainer), "--relay-writable", "--relay-writable")
		if mode == "relay-keeper" {
			wantArg(t, container(t, o.keeperDS, "keeper"), "--relay-writable", "--relay-writable")
		}
		wantNoArg(t, container(t, render(t, "csi.plugin.fuseMode="+mode).ds, pluginContainer), "--relay-writable")
	}
	for _, mode := range []string{"child", "sidecar", "keeper"} {
		if _, err := renderChart(loadChart(t), userValues(t, "csi.plugin.fuseMode="+mode, "csiDriver.podInfoOnMount=true", "relay.writable=true")); err == nil ||
			!strings.Contains(err.Error(), "relay.writable=true is for csi.plugin.fuseMode=relay or relay-keeper") {
			t.Errorf("relay.writable in the %s mode: %v, want a refusal naming the relay modes", mode, err)
		}
	}
	for _, mode := range []string{"child", "sidecar", "keeper"} {
		o := render(t, "csi.plugin.fuseMode="+mode)
		p := container(t, o.ds, pluginContainer)
		for _, flag := range []string{"--relay-dir", "--relay-backend-wait", "--relay-server-uid"} {
			wantNoArg(t, p, flag)
		}
		for _, v := range o.ds.Spec.Template.Spec.Volumes {
			if v.Name == "relay-dir" {
				t.Errorf("fuseMode %s has the relay's volume", mode)
			}
		}
	}
	// The defaults: the plugin's own (30 s; nobody).
	p := container(t, render(t, "csi.plugin.fuseMode=relay").ds, pluginContainer)
	wantArg(t, p, "--relay-backend-wait", "--relay-backend-wait=30s")
	wantArg(t, p, "--relay-server-uid", "--relay-server-uid=65534")
	wantNoArg(t, p, "--fuse-direct-io")
}
