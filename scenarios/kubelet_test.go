package scenarios

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestKubeletVersion(t *testing.T) {
	for in, want := range map[string]string{"v1.37.2": "v1.37.2", "1.36.3": "v1.36.3", " v1.37 ": "v1.37",
		"v1.36.3-eks-1a2b3c": "v1.36.3-eks-1a2b3c", "v1.37.0-alpha.1": "v1.37.0-alpha.1"} {
		v, err := ParseKubeletVersion(in)
		if err != nil || v.String() != want || !v.Known() {
			t.Errorf("ParseKubeletVersion(%q) = %s, %v; want %s", in, v, err, want)
		}
	}
	for _, in := range []string{"", "latest", "v1", "vx.y"} {
		if v, err := ParseKubeletVersion(in); err == nil {
			t.Errorf("ParseKubeletVersion(%q) = %s, want an error", in, v)
		}
	}
	v136, v137 := MustKubeletVersion("v1.36.3"), MustKubeletVersion("v1.37.2")
	if !v137.AtLeast(v136) || v136.AtLeast(v137) || !v137.AtLeast(MustKubeletVersion("v1.37")) {
		t.Error("AtLeast compares numerically")
	}
	if !MustKubeletVersion("v1.36.3-eks-1a2b3c").Equal(v136) {
		t.Error("a vendor suffix does not change the version")
	}
	var unknown KubeletVersion
	if unknown.Known() || unknown.String() != "unknown" || unknown.AtLeast(v136) || v136.AtLeast(unknown) {
		t.Error("the zero version is unknown and compares to nothing")
	}
	if v137.MinorString() != "v1.37" {
		t.Errorf("MinorString = %s", v137.MinorString())
	}
}

func TestKubeletRange(t *testing.T) {
	before, since := KubeletBefore("v1.37"), KubeletSince("v1.37")
	for _, c := range []struct {
		v             string
		before, since bool
	}{
		{"v1.33.13", true, false}, {"v1.36.3", true, false}, {"v1.36.99", true, false},
		{"v1.37.0", false, true}, {"v1.37.2", false, true}, {"v1.40.1", false, true},
	} {
		v := MustKubeletVersion(c.v)
		if before.Contains(v) != c.before || since.Contains(v) != c.since {
			t.Errorf("%s: in %s = %t, in %s = %t", c.v, before, before.Contains(v), since, since.Contains(v))
		}
		if !(KubeletRange{}).Contains(v) {
			t.Errorf("the zero range must hold %s", c.v)
		}
	}
	if before.Contains(KubeletVersion{}) || since.Contains(KubeletVersion{}) || !(KubeletRange{}).Contains(KubeletVersion{}) {
		t.Error("an unknown version is only in the range of all versions")
	}
	between := KubeletRange{From: MustKubeletVersion("v1.35"), Before: MustKubeletVersion("v1.37")}
	for s, r := range map[string]KubeletRange{"kubelet < v1.37": before, "kubelet ≥ v1.37": since, "any kubelet": {},
		"kubelet v1.35 to < v1.37": between} {
		if r.String() != s {
			t.Errorf("String() = %q, want %q", r.String(), s)
		}
	}
	if (KubeletRange{From: MustKubeletVersion("v1.37"), Before: MustKubeletVersion("v1.36")}).validate() == nil {
		t.Error("an empty range must not validate")
	}
}

// TestEvaluateByKubelet: a run is judged by the expectations for its kubelet, and one whose kubelet is unknown
// fails every version-dependent expectation.
func TestEvaluateByKubelet(t *testing.T) {
	sc := restartScenario(t)
	sc.Expect = []Expectation{
		{Check: FailsWith{C: reader, Errno: "ENOTCONN"}},
		{Check: Recovers{C: reader}, Kubelet: KubeletSince("v1.37")},
		{Check: NeverRecovers{C: reader, After: AfterKill}, Kubelet: KubeletBefore("v1.37")},
	}
	if err := sc.Validate(); err != nil || !sc.VersionDependent() {
		t.Fatalf("Validate: %v, VersionDependent %t", err, sc.VersionDependent())
	}
	ev := restartStory() // the reader recovers
	for _, c := range []struct {
		kubelet string
		index   []int
		ok      []bool
	}{
		{"v1.37.2", []int{0, 1}, []bool{true, true}},
		{"v1.36.3", []int{0, 2}, []bool{true, false}},
		{"", []int{0, 1, 2}, []bool{true, false, false}},
	} {
		ev.Kubelet = KubeletVersion{}
		if c.kubelet != "" {
			ev.Kubelet = MustKubeletVersion(c.kubelet)
		}
		vs := Evaluate(&sc, ev, Timing{ReadInterval: time.Second, BackoffBase: time.Second})
		if len(vs) != len(c.index) {
			t.Errorf("kubelet %q: %d verdicts, want %d", c.kubelet, len(vs), len(c.index))
			continue
		}
		for i, v := range vs {
			if v.Index != c.index[i] || v.Result.OK != c.ok[i] {
				t.Errorf("kubelet %q: verdict %d = expectation %d ok %t (%s), want expectation %d ok %t",
					c.kubelet, i, v.Index, v.Result.OK, v.Result.Why, c.index[i], c.ok[i])
			}
		}
		if c.kubelet == "" && !strings.Contains(vs[1].Result.Why, "kubelet version") {
			t.Errorf("an unknown kubelet must be the reason: %s", vs[1].Result.Why)
		}
	}
}

// TestCatalogVersions: the subPath scenarios expect different outcomes before and since kubelet's subPath fix,
// health-report before and since its volume health manager, every other scenario the same on every kubelet,
// and every scenario has expectations on both sides.
func TestCatalogVersions(t *testing.T) {
	dependent := []string{"subpath", "remediate-subpath", "health-report"}
	for _, sc := range Catalog() {
		if got, want := sc.VersionDependent(), slices.Contains(dependent, sc.Name); got != want {
			t.Errorf("%s: VersionDependent = %t, want %t", sc.Name, got, want)
		}
		for _, v := range []string{"v1.36.3", "v1.37.2"} {
			if len(sc.ExpectFor(MustKubeletVersion(v))) == 0 {
				t.Errorf("%s expects nothing on kubelet %s", sc.Name, v)
			}
		}
	}
	sp, err := Lookup("subpath")
	if err != nil {
		t.Fatal(err)
	}
	recovers := func(v string) bool {
		for _, e := range sp.ExpectFor(MustKubeletVersion(v)) {
			if _, ok := e.Check.(Recovers); ok {
				return true
			}
		}
		return false
	}
	if recovers("v1.36.3") || !recovers("v1.37.2") {
		t.Errorf("subpath recovers on v1.36.3: %t, on v1.37.2: %t; want false, true", recovers("v1.36.3"), recovers("v1.37.2"))
	}
}

func TestEvidenceKubeletJSON(t *testing.T) {
	ev := Evidence{Kubelet: MustKubeletVersion("v1.36.3-eks-1a2b3c")}
	js, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"Kubelet":"v1.36.3-eks-1a2b3c"`) {
		t.Errorf("json: %s", js)
	}
	var back Evidence
	if err := json.Unmarshal(js, &back); err != nil || back.Kubelet.String() != "v1.36.3-eks-1a2b3c" {
		t.Errorf("round trip: %s, %v", back.Kubelet, err)
	}
	js, _ = json.Marshal(Evidence{})
	if err := json.Unmarshal(js, &back); err != nil || back.Kubelet.Known() {
		t.Errorf("an unknown version round-trips as unknown: %s, %v", js, err)
	}
}

// TestReadmeVersions keeps scenarios/README.md's per-version table in step with the catalog: one row per
// scenario and kubelet minor on either side of the subPath fix.
func TestReadmeVersions(t *testing.T) {
	rows := map[string]bool{}
	for _, cells := range readmeTable(t, "## Outcomes per kubelet version") {
		rows[cells[0]+" "+cells[1]] = true
	}
	for _, n := range Names() {
		for _, v := range []string{"v1.36", SubPathFixedIn} {
			if !rows[n+" "+v] {
				t.Errorf("README.md's table of outcomes per kubelet version lacks %s on %s", n, v)
			}
			delete(rows, n+" "+v)
		}
	}
	for r := range rows {
		t.Errorf("README.md's table of outcomes per kubelet version has a row %q that is not in the catalog", r)
	}
}
