package scenarios

import (
	"encoding/json"
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
	sc := Scenario{Name: "by-kubelet", Title: "judged by kubelet", Pod: Pod{RestartPolicy: RestartAlways,
		Containers: []Container{{Name: reader}}}, Steps: []Step{KillPlugin(), StartPlugin()}}
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

// TestNotRunnableExpected: a row with a RestartAllContainers rule needs the feature from v1.36; refused on an
// older kubelet it is NOT RUNNABLE as foretold, refused on one that has it (a gate turned off) it is not; a row
// that needs nothing special is never expected to be refused.
func TestNotRunnableExpected(t *testing.T) {
	restartAll := Scenario{Name: "restart-all", Pod: Pod{Containers: []Container{{Name: "reader", RestartAllContainers: true}}}}
	plain := Scenario{Name: "plain", Pod: Pod{Containers: []Container{{Name: "reader"}}}}
	refused := &NotRunnableError{Why: "no feature", Fix: "newer"}
	for _, c := range []struct {
		sc      Scenario
		kubelet string
		err     error
		want    bool
	}{
		{restartAll, "v1.34.4", refused, true},
		{restartAll, "v1.35.4", refused, true},
		{restartAll, "v1.36.3", refused, false},
		{restartAll, "", refused, false}, // the node's version unknown: nothing foretold
		{restartAll, "v1.34.4", nil, false},
		{plain, "v1.34.4", refused, false},
	} {
		o := &Outcome{Scenario: c.sc, Err: c.err}
		if c.kubelet != "" {
			o.Kubelet = MustKubeletVersion(c.kubelet)
		}
		if got := o.NotRunnableExpected(); got != c.want {
			t.Errorf("%s on %q (err %v): NotRunnableExpected = %t, want %t", c.sc.Name, c.kubelet, c.err, got, c.want)
		}
	}
	if got := restartAll.Needs(); len(got) != 1 || got[0].String() != RestartAllContainersFeature+" (kubelet v1.36+)" {
		t.Errorf("Needs = %v", got)
	}
}
