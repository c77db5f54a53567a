package kube

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
)

// renderPluginDS renders the chart's plugin DaemonSet with the values the backend installs for sc (its chart
// sets), as helm install does.
func renderPluginDS(t *testing.T, repo string, sets []string) *appsv1.DaemonSet {
	t.Helper()
	vals := map[string]any{"fullnameOverride": releaseName}
	if err := mergeSets(vals, sets); err != nil {
		t.Fatal(err)
	}
	return renderPluginDSValues(t, repo, vals)
}

// renderPluginDSValues renders the plugin DaemonSet of the chart in repo with values vals.
func renderPluginDSValues(t *testing.T, repo string, vals map[string]any) *appsv1.DaemonSet {
	t.Helper()
	c, err := loader.Load(filepath.Join(repo, "chart"))
	if err != nil {
		t.Fatal(err)
	}
	top, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: releaseName, Namespace: "ns", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(c, top)
	if err != nil {
		t.Fatalf("render with %v: %v", vals, err)
	}
	for name, doc := range out {
		if !strings.HasSuffix(name, "daemonset.yaml") {
			continue
		}
		var ds appsv1.DaemonSet
		if err := yaml.UnmarshalStrict([]byte(doc), &ds); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return &ds
	}
	t.Fatal("no daemonset.yaml rendered")
	return nil
}

// TestWorkloadPodServer: in the sidecar mode with gcsfuse, the workload pod's FUSE sidecar runs `csi-plugin
// sidecar` with the plugin's FUSE server flags, after a copy of the plugin pod's fake GCS server (a native
// sidecar whose startup probe holds the FUSE sidecar back until the bucket is served); with dummy-fuse the pod
// gets neither.
func TestWorkloadPodServer(t *testing.T) {
	repo, m := repoManifests(t)
	base, err := catalog.Select([]string{"sidecar-killed"})
	if err != nil || len(base) != 1 {
		t.Fatalf("catalog: %v", err)
	}
	n := runNames("sidecar-killed")

	dummy := base[0]
	s, err := serverOf(&renderPluginDS(t, repo, dummy.Plugin.ChartSets()).Spec.Template.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.args) != 0 || len(s.before) != 0 {
		t.Errorf("dummy-fuse: server %+v, want nothing added", s)
	}

	sc, err := base[0].ForServer(fuseserver.Gcsfuse)
	if err != nil {
		t.Fatal(err)
	}
	ds := renderPluginDS(t, repo, sc.Plugin.ChartSets())
	if s, err = serverOf(&ds.Spec.Template.Spec); err != nil {
		t.Fatal(err)
	}
	var endpoint string
	for _, a := range s.args {
		if v, ok := strings.CutPrefix(a, "--fuse-server-opt=endpoint="); ok {
			endpoint = v
		}
	}
	if !slices.Contains(s.args, "--fuse-server=gcsfuse") || !slices.Contains(s.args, "--fuse-server-path=/usr/local/bin/gcsfuse") || endpoint == "" {
		t.Fatalf("server flags %q, want gcsfuse, its path in the image and its endpoint", s.args)
	}
	p, err := m.workloadPod(&sc, n, "dummy-fuse-csi:test", time.Second, nil, s)
	if err != nil {
		t.Fatal(err)
	}
	inits := p.Spec.InitContainers
	i := fuseSidecar(&p.Spec)
	if len(inits) != 2 || i != 1 || inits[0].Name != "fake-gcs" {
		t.Fatalf("init containers %q, want the fake GCS server, then the FUSE sidecar", containerNamesOf(inits))
	}
	fake := inits[0]
	if fake.RestartPolicy == nil || *fake.RestartPolicy != corev1.ContainerRestartPolicyAlways || fake.StartupProbe == nil {
		t.Errorf("fake GCS server %+v: want a native sidecar with a startup probe (the FUSE sidecar starts once it serves)", fake)
	}
	// gcsfuse downloads from the endpoint's host:port, which the fake serves objects for only as its public host.
	var publicHost string
	for _, a := range fake.Args {
		if v, ok := strings.CutPrefix(a, "-public-host="); ok {
			publicHost = v
		}
	}
	if publicHost == "" || endpoint != "http://"+publicHost+"/storage/v1/" {
		t.Errorf("gcsfuse endpoint %q, fake GCS public host %q: want the endpoint on the public host", endpoint, publicHost)
	}
	side := inits[1]
	want := append(sc.Pod.Sidecar.Args("/dfc-sidecar/"+n.pv+"/socket"), s.args...)
	if !slices.Equal(side.Args, want) {
		t.Errorf("FUSE sidecar args %q, want %q", side.Args, want)
	}
	if ds.Spec.Template.Spec.HostNetwork || p.Spec.HostNetwork {
		t.Error("the fake GCS server on 127.0.0.1 is the pod's own only without the host network")
	}
}

func containerNamesOf(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// TestOperatorServerInTheSidecar: in the sidecar mode with an operator's server (the chart's fuseServer.spec),
// the workload pod's FUSE sidecar gets what the plugin's pod has: the copy out of the operator's image first,
// the volumes of the files and the spec, and the plugin's mounts of them.
func TestOperatorServerInTheSidecar(t *testing.T) {
	repo, m := repoManifests(t)
	base, err := catalog.Select([]string{"sidecar-killed"})
	if err != nil || len(base) != 1 {
		t.Fatalf("catalog: %v", err)
	}
	vals := map[string]any{"fullnameOverride": releaseName}
	if err := mergeSets(vals, append(base[0].Plugin.ChartSets(), "fuseServer.image=example.invalid/rclone:1", "fuseServer.files={/usr/local/bin/rclone}")); err != nil {
		t.Fatal(err)
	}
	vals["fuseServer"].(map[string]any)["spec"] = "name: rclone\nexecutable: rclone\nargs: [mount2, x, \"{mountpoint}\"]\nservesFD: true\n"
	s, err := serverOf(&renderPluginDSValues(t, repo, vals).Spec.Template.Spec)
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.workloadPod(&base[0], runNames("sidecar-killed"), "dummy-fuse-csi:test", time.Second, nil, s)
	if err != nil {
		t.Fatal(err)
	}
	inits := p.Spec.InitContainers
	if names := containerNamesOf(inits); len(inits) != 2 || inits[0].Name != "server-files" || inits[0].Image != "example.invalid/rclone:1" || fuseSidecar(&p.Spec) != 1 {
		t.Fatalf("init containers %q, want the copy out of the operator's image, then the FUSE sidecar", names)
	}
	var mounts, vols []string
	for _, vm := range inits[1].VolumeMounts {
		mounts = append(mounts, vm.Name)
	}
	for _, v := range p.Spec.Volumes {
		vols = append(vols, v.Name)
	}
	for _, name := range serverVolumes {
		if !slices.Contains(mounts, name) || !slices.Contains(vols, name) {
			t.Errorf("%s: the sidecar mounts %q, the pod has %q", name, mounts, vols)
		}
	}
	if !slices.Contains(inits[1].Args, "--fuse-server=/etc/dummy-fuse-csi/server/spec.yaml") {
		t.Errorf("FUSE sidecar args %q, want the spec the chart mounts", inits[1].Args)
	}
}

// repoManifests finds the repository and loads its manifests.
func repoManifests(t *testing.T) (string, *manifests) {
	t.Helper()
	repo, err := FindRepo(".")
	if err != nil {
		t.Fatal(err)
	}
	m, err := loadManifests(repo + "/manifests")
	if err != nil {
		t.Fatal(err)
	}
	return repo, m
}
