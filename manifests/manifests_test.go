package manifests_test

import (
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/strvals"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/sidecar"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
)

const (
	chartDir      = "../chart"
	fileName      = "dummy-file.txt" // the only file in dummy-fuse's root
	workloadBin   = "/usr/local/bin/dummy-fuse-workload"
	scenarioLabel = "dummy-fuse-csi/scenario"
	chartValues   = "dummy-fuse-csi/chart-values"
)

// kindConfig is the subset of kind's v1alpha4 Cluster config this repository may use; decoding strictly into
// it catches a misspelt field without depending on kind's Go module.
type kindConfig struct {
	Kind                    string          `json:"kind"`
	APIVersion              string          `json:"apiVersion"`
	Name                    string          `json:"name"`
	ContainerdConfigPatches []string        `json:"containerdConfigPatches,omitempty"`
	FeatureGates            map[string]bool `json:"featureGates,omitempty"`
	KubeadmConfigPatches    []string        `json:"kubeadmConfigPatches,omitempty"`
	Nodes                   []struct {
		Role        string `json:"role"`
		Image       string `json:"image,omitempty"`
		ExtraMounts []struct {
			HostPath      string `json:"hostPath"`
			ContainerPath string `json:"containerPath"`
			Propagation   string `json:"propagation,omitempty"`
		} `json:"extraMounts,omitempty"`
	} `json:"nodes"`
}

// set is everything decoded from manifests/.
type set struct {
	pvs     map[string]*corev1.PersistentVolume
	pvcs    map[string]*corev1.PersistentVolumeClaim
	pods    map[string]*corev1.Pod // pods and Deployment templates, keyed by file name
	deploys map[string]*appsv1.Deployment
	kind    *kindConfig
	files   []string
}

// chartDefaults are the values the manifests must agree with.
type chartDefaults struct {
	driverName string
	image      string
}

func loadChartDefaults(t *testing.T) chartDefaults {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	vals := chartutil.Values(c.Values)
	driver, err := vals.PathValue("driverName")
	if err != nil {
		t.Fatalf("chart values: %v", err)
	}
	repo, err := vals.PathValue("image.repository")
	if err != nil {
		t.Fatalf("chart values: %v", err)
	}
	return chartDefaults{driverName: driver.(string), image: repo.(string) + ":" + c.Metadata.AppVersion}
}

// load decodes every YAML file strictly into its k8s.io/api type; each file holds exactly one object.
func load(t *testing.T) set {
	t.Helper()
	s := set{
		pvs:     map[string]*corev1.PersistentVolume{},
		pvcs:    map[string]*corev1.PersistentVolumeClaim{},
		pods:    map[string]*corev1.Pod{},
		deploys: map[string]*appsv1.Deployment{},
	}
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	s.files = files
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var docs []string
		for _, d := range releaseutil.SplitManifests(string(data)) {
			if strings.TrimSpace(d) != "" {
				docs = append(docs, d)
			}
		}
		if len(docs) != 1 {
			t.Errorf("%s: %d objects, want one concern (one object) per file", f, len(docs))
			continue
		}
		doc := []byte(docs[0])
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		strict := func(into any) {
			if err := yaml.UnmarshalStrict(doc, into); err != nil {
				t.Errorf("%s: strict decoding of %s: %v", f, tm.Kind, err)
			}
		}
		switch tm.APIVersion + "/" + tm.Kind {
		case "v1/PersistentVolume":
			o := &corev1.PersistentVolume{}
			strict(o)
			s.pvs[f] = o
		case "v1/PersistentVolumeClaim":
			o := &corev1.PersistentVolumeClaim{}
			strict(o)
			s.pvcs[f] = o
		case "v1/Pod":
			o := &corev1.Pod{}
			strict(o)
			s.pods[f] = o
		case "apps/v1/Deployment":
			o := &appsv1.Deployment{}
			strict(o)
			s.deploys[f] = o
			s.pods[f] = &corev1.Pod{ObjectMeta: o.Spec.Template.ObjectMeta, Spec: o.Spec.Template.Spec}
		case "kind.x-k8s.io/v1alpha4/Cluster":
			if s.kind != nil {
				t.Errorf("%s: a second kind config", f)
			}
			s.kind = &kindConfig{}
			strict(s.kind)
		default:
			t.Errorf("%s: unexpected object %s %s", f, tm.APIVersion, tm.Kind)
		}
	}
	return s
}

func only[T any](t *testing.T, m map[string]T, what string) T {
	t.Helper()
	if len(m) != 1 {
		t.Fatalf("want exactly one %s, got %d", what, len(m))
	}
	for _, v := range m {
		return v
	}
	panic("unreachable")
}

func TestVolume(t *testing.T) {
	s, def := load(t), loadChartDefaults(t)
	pv := only(t, s.pvs, "PersistentVolume")
	pvc := only(t, s.pvcs, "PersistentVolumeClaim")

	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != def.driverName || pv.Spec.CSI.VolumeHandle == "" {
		t.Errorf("PV csi %+v, want driver %q (the chart's driverName) and a volumeHandle", pv.Spec.CSI, def.driverName)
	}
	if pv.Spec.StorageClassName != "" {
		t.Errorf("PV storageClassName %q, want \"\" (static)", pv.Spec.StorageClassName)
	}
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "" {
		t.Errorf("PVC storageClassName must be set to \"\" so a default StorageClass does not provision instead")
	}
	if pvc.Spec.VolumeName != pv.Name {
		t.Errorf("PVC volumeName %q, want the PV %q", pvc.Spec.VolumeName, pv.Name)
	}
	for _, m := range pv.Spec.AccessModes {
		if m != corev1.ReadOnlyMany && m != corev1.ReadWriteOnce {
			t.Errorf("PV access mode %s: dummy-fuse is read-only, use ReadOnlyMany (or ReadWriteOnce)", m)
		}
	}
	for _, m := range pvc.Spec.AccessModes {
		if !slices.Contains(pv.Spec.AccessModes, m) {
			t.Errorf("PVC access mode %s is not offered by the PV %v: it would never bind", m, pv.Spec.AccessModes)
		}
	}
	req, capacity := pvc.Spec.Resources.Requests[corev1.ResourceStorage], pv.Spec.Capacity[corev1.ResourceStorage]
	if req.IsZero() || req.Cmp(capacity) > 0 {
		t.Errorf("PVC requests %s, PV capacity %s: it would never bind", req.String(), capacity.String())
	}
}

// containerSetup is what a scenario of the catalog asks of one workload container.
type containerSetup struct {
	exitOnError, keepOpen bool
	propagation           corev1.MountPropagationMode
	subPath, mountPath    string
	restartAll            bool // a restart rule RestartAllContainers (KEP-5532)
}

type scenarioWant struct {
	chartValues string // helm --set form, "" for the chart's defaults
	containers  map[string]containerSetup
}

// catalogSetups derives, from the scenario catalog itself, the chart values and containers each scenario
// needs, so the labelled manifests cannot drift from what `make scenario-<name>` runs.
func catalogSetups(t *testing.T) map[string]scenarioWant {
	t.Helper()
	out := map[string]scenarioWant{}
	for _, sc := range catalog.All() {
		if sc.Pod.RestartPolicy != scenarios.RestartAlways {
			t.Errorf("scenario %s: restart policy %s; the manifests only use Always", sc.Name, sc.Pod.RestartPolicy)
		}
		w := scenarioWant{chartValues: strings.Join(sc.Plugin.ChartSets(), ","), containers: map[string]containerSetup{}}
		for _, c := range sc.Pod.Containers {
			w.containers[c.Name] = containerSetup{
				exitOnError: c.ExitOnError, keepOpen: c.KeepOpen, propagation: corev1.MountPropagationMode(c.Prop()),
				subPath: c.SubPath, mountPath: c.Mount(), restartAll: c.RestartAllContainers,
			}
		}
		out[sc.Name] = w
	}
	return out
}

func TestWorkloads(t *testing.T) {
	s, def := load(t), loadChartDefaults(t)
	pvc := only(t, s.pvcs, "PersistentVolumeClaim")
	setups := catalogSetups(t)
	podNames := map[string]string{}

	for f, pod := range s.pods {
		t.Run(f, func(t *testing.T) {
			if s.deploys[f] == nil {
				if other, dup := podNames[pod.Name]; dup {
					t.Errorf("pod name %q also used by %s", pod.Name, other)
				}
				podNames[pod.Name] = f
			}
			spec := pod.Spec
			if spec.RestartPolicy != corev1.RestartPolicyAlways {
				t.Errorf("restartPolicy %q, want Always (the container restarts that the scenarios observe)", spec.RestartPolicy)
			}
			// A pod of the sidecar FUSE mode has the emptyDir of the plugin's socket besides the volume.
			volumes := slices.DeleteFunc(slices.Clone(spec.Volumes), func(v corev1.Volume) bool { return v.Name == fusemode.SidecarVolume })
			if hasSocketVolume := len(volumes) < len(spec.Volumes); hasSocketVolume != (len(spec.InitContainers) > 0) {
				t.Errorf("volume %s without a sidecar, or a sidecar without it: volumes %+v", fusemode.SidecarVolume, spec.Volumes)
			}
			if len(volumes) != 1 {
				t.Fatalf("want one volume (besides %s), got %+v", fusemode.SidecarVolume, spec.Volumes)
			}
			vol := volumes[0]
			for _, c := range spec.InitContainers {
				checkFuseSidecar(t, c, spec, def, s)
			}
			switch {
			case vol.PersistentVolumeClaim != nil:
				if vol.PersistentVolumeClaim.ClaimName != pvc.Name {
					t.Errorf("claimName %q, want %q from pvc.yaml", vol.PersistentVolumeClaim.ClaimName, pvc.Name)
				}
			case vol.CSI != nil:
				if vol.CSI.Driver != def.driverName {
					t.Errorf("inline csi driver %q, want the chart's %q", vol.CSI.Driver, def.driverName)
				}
			default:
				t.Errorf("volume %s is neither the PVC nor an inline CSI volume", vol.Name)
			}

			scenario, labelled := pod.Labels[scenarioLabel]
			want, known := setups[scenario]
			if labelled {
				if !known {
					t.Errorf("label %s=%q names no scenario of the catalog", scenarioLabel, scenario)
				}
				if got := pod.Annotations[chartValues]; got != want.chartValues {
					t.Errorf("annotation %s=%q, want %q", chartValues, got, want.chartValues)
				}
				if got := containerNamesOf(spec); !sameSet(got, keys(want.containers)) {
					t.Errorf("containers %q, want %q as in the catalog", got, keys(want.containers))
				}
			}
			if cv, ok := pod.Annotations[chartValues]; ok {
				checkChartValues(t, cv)
			}

			for _, c := range spec.Containers {
				if c.Image != def.image {
					t.Errorf("container %s: image %q, want %q (the chart's image and appVersion, what `make kind-up` loads)", c.Name, c.Image, def.image)
				}
				if c.ImagePullPolicy != corev1.PullIfNotPresent {
					t.Errorf("container %s: imagePullPolicy %q, want IfNotPresent (the image is loaded, not pulled)", c.Name, c.ImagePullPolicy)
				}
				if !slices.Equal(c.Command, []string{workloadBin}) {
					t.Errorf("container %s: command %q, want [%s]", c.Name, c.Command, workloadBin)
				}
				// The workload's own parser: an unknown or misspelt flag fails here, not in a crash loop.
				cfg, err := workload.ParseArgs(c.Args, io.Discard)
				if err != nil {
					t.Errorf("container %s: args %q: %v", c.Name, c.Args, err)
					continue
				}
				if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != vol.Name {
					t.Errorf("container %s: mounts %+v, want one mount of volume %s", c.Name, c.VolumeMounts, vol.Name)
					continue
				}
				m := c.VolumeMounts[0]
				wantFile := path.Join(m.MountPath, fileName)
				if m.SubPath != "" {
					if path.Base(m.SubPath) != fileName || path.Base(m.MountPath) != fileName {
						t.Errorf("container %s: subPath %q at %q: the volume's root only holds %s", c.Name, m.SubPath, m.MountPath, fileName)
					}
					wantFile = m.MountPath
				}
				if cfg.File != wantFile {
					t.Errorf("container %s: reads %q, but the volume's file is at %q", c.Name, cfg.File, wantFile)
				}
				prop := corev1.MountPropagationNone
				if m.MountPropagation != nil {
					prop = *m.MountPropagation
				}
				restartAll := slices.ContainsFunc(c.RestartPolicyRules, func(r corev1.ContainerRestartRule) bool {
					return r.Action == corev1.ContainerRestartRuleActionRestartAllContainers && r.ExitCodes != nil &&
						r.ExitCodes.Operator == corev1.ContainerRestartRuleOnExitCodesOpIn && slices.Equal(r.ExitCodes.Values, []int32{scenarios.RestartAllExitCode})
				})
				if cs, ok := want.containers[c.Name]; labelled && ok {
					if cfg.ExitOnError != cs.exitOnError || cfg.KeepOpen != cs.keepOpen || prop != cs.propagation ||
						m.SubPath != cs.subPath || m.MountPath != cs.mountPath || restartAll != cs.restartAll {
						t.Errorf("container %s: exit-on-error=%v keep-open=%v propagation=%s subPath=%q mountPath=%q restart-all=%v, want %+v for scenario %s",
							c.Name, cfg.ExitOnError, cfg.KeepOpen, prop, m.SubPath, m.MountPath, restartAll, cs, scenario)
					}
				}
			}
		})
	}
	// Every scenario a cluster can run is either labelled on a manifest or, like exit-without-restore (pod.yaml
	// with other chart values), mapped to one in the README's scenario table; one of the local backend only (a
	// mode the chart does not deploy yet) may have a row, and so may a row that writes (it needs a ReadWriteOnce
	// volume, which the kube backend makes itself: these manifests are the read-only demo's).
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range setups {
		row := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(name) + "` \\| `([^`]+)` \\| (.*) \\|$").FindSubmatch(readme)
		if row == nil {
			if sc, err := catalog.Lookup(name); err == nil && (sc.RunsOn(scenarios.BackendKube) != nil || len(sc.Writers()) > 0) {
				continue
			}
			t.Errorf("README.md's scenario table has no row for %s", name)
			continue
		}
		p := s.pods[string(row[1])]
		if p == nil {
			t.Errorf("README.md maps scenario %s to %s, which is no workload manifest", name, row[1])
			continue
		}
		if got := containerNamesOf(p.Spec); !sameSet(got, keys(w.containers)) {
			t.Errorf("scenario %s: %s has containers %q, want %q", name, row[1], got, keys(w.containers))
		}
		for _, set := range strings.Split(w.chartValues, ",") {
			if set != "" && !strings.Contains(string(row[2]), "`"+set+"`") {
				t.Errorf("README.md's row for %s does not name the chart value %s", name, set)
			}
		}
	}
	for f, d := range s.deploys {
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("%s: selector %v does not select its template labels (%v)", f, d.Spec.Selector, err)
		}
	}
	if len(s.deploys) == 0 {
		t.Error("no Deployment variant")
	}
	if !slices.ContainsFunc(s.files, func(f string) bool { v := s.pods[f]; return v != nil && v.Spec.Volumes[0].CSI != nil }) {
		t.Error("no inline ephemeral CSI volume example")
	}
}

// checkChartValues renders nothing but validates the --set values against the chart's schema, so a manifest
// cannot ask for a chart value that does not exist.
func checkChartValues(t *testing.T, sets string) {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{}
	if err := strvals.ParseInto(sets, vals); err != nil {
		t.Errorf("chart values %q: %v", sets, err)
		return
	}
	opts := chartutil.ReleaseOptions{Name: "t", Namespace: "t", IsInstall: true}
	if _, err := chartutil.ToRenderValues(c, vals, opts, nil); err != nil {
		t.Errorf("chart values %q rejected by the chart: %v", sets, err)
	}
}

func TestKindConfig(t *testing.T) {
	k := load(t).kind
	if k == nil {
		t.Fatal("no kind-config.yaml")
	}
	if len(k.Nodes) != 1 || k.Nodes[0].Role != "control-plane" {
		t.Errorf("nodes %+v, want a single control-plane node (which kind makes schedulable)", k.Nodes)
	}
	if !k.FeatureGates["CSIVolumeHealth"] {
		t.Errorf("featureGates %v: CSIVolumeHealth must be on, or kubelet reports no volume health", k.FeatureGates)
	}
	var period struct {
		Kind                 string `json:"kind"`
		VolumeStatsAggPeriod string `json:"volumeStatsAggPeriod"`
	}
	for _, p := range k.KubeadmConfigPatches {
		if err := yaml.UnmarshalStrict([]byte(p), &period); err != nil {
			t.Errorf("kubeadmConfigPatches: %v", err)
		}
	}
	if period.Kind != "KubeletConfiguration" || period.VolumeStatsAggPeriod != "2s" {
		t.Errorf("no KubeletConfiguration patch setting volumeStatsAggPeriod to 2s (health-report's period): %+v", period)
	}
	script, err := os.ReadFile("../hack/kind-up.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), "KIND_CLUSTER_NAME:-"+k.Name+"}") {
		t.Errorf("hack/kind-up.sh's default cluster name is not the config's %q", k.Name)
	}
}

// TestREADME: every manifest is explained, and every chart value the README names exists.
func TestREADME(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	for _, f := range load(t).files {
		if !strings.Contains(readme, "`"+f+"`") {
			t.Errorf("README.md does not explain %s", f)
		}
	}
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals := chartutil.Values(c.Values)
	for _, name := range regexp.MustCompile(`\b(?:csi\.plugin|registrar|csiDriver|image)\.[A-Za-z.]*[A-Za-z]`).FindAllString(readme, -1) {
		if _, err := vals.PathValue(name); err != nil {
			if _, terr := vals.Table(name); terr != nil {
				t.Errorf("README.md names chart value %s, which values.yaml does not have", name)
			}
		}
	}
}

func containerNamesOf(spec corev1.PodSpec) []string {
	var out []string
	for _, c := range spec.Containers {
		out = append(out, c.Name)
	}
	return out
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// checkFuseSidecar checks an init container as the FUSE sidecar of the sidecar FUSE mode: a native sidecar
// (restartPolicy Always) running `csi-plugin sidecar` without privileges, whose --socket is where the plugin
// puts the socket of the pod's volume: <the socket emptyDir's mount>/<PV name, or the inline volume's name>/socket.
func checkFuseSidecar(t *testing.T, c corev1.Container, spec corev1.PodSpec, def chartDefaults, s set) {
	t.Helper()
	if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("init container %s: not a native sidecar (restartPolicy Always)", c.Name)
	}
	if c.Image != def.image || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("init container %s: image %q %q, want %q IfNotPresent", c.Name, c.Image, c.ImagePullPolicy, def.image)
	}
	if !slices.Equal(c.Command, []string{"/usr/local/bin/csi-plugin"}) || len(c.Args) == 0 || c.Args[0] != "sidecar" {
		t.Fatalf("init container %s: %q %q, want csi-plugin sidecar", c.Name, c.Command, c.Args)
	}
	cfg, err := sidecar.ParseArgs(c.Args[1:], io.Discard)
	if err != nil {
		t.Fatalf("init container %s: args %q: %v", c.Name, c.Args, err)
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
		(sc.Privileged != nil && *sc.Privileged) {
		t.Errorf("init container %s: securityContext %+v, want non-root, no privilege escalation, all capabilities dropped", c.Name, sc)
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != fusemode.SidecarVolume {
		t.Fatalf("init container %s: mounts %+v, want only %s", c.Name, c.VolumeMounts, fusemode.SidecarVolume)
	}
	var specName string // the volume's spec name in kubelet's target path
	for _, v := range spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			for _, pv := range s.pvs {
				specName = pv.Name
			}
		case v.CSI != nil:
			specName = v.Name
		}
	}
	if want := path.Join(c.VolumeMounts[0].MountPath, specName, fusemode.SocketName); cfg.Socket != want {
		t.Errorf("init container %s: --socket %q, want %q (where the plugin puts the socket)", c.Name, cfg.Socket, want)
	}
}
