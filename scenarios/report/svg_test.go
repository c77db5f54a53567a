package report

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/scenariotest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// svgText is a <text> element of a picture, and svgMark a line or a step's rectangle.
type svgText struct {
	x, y, size float64
	anchor, s  string
	extra      float64 // tspan dx
}

type svgMark struct {
	b     box
	title string
}

// parseSVG reads the texts, the lines (gridlines excepted: they sit behind everything), the rectangles with a
// "step N:" tooltip, and the marks of a picture: its paths (triangles, diamonds, arrowheads), circles, and
// rectangles small enough to be a mark rather than a bar or a background (exits, failed reads).
func parseSVG(t *testing.T, svg []byte) (texts []svgText, lines, steps, marks []svgMark) {
	t.Helper()
	attr := func(se xml.StartElement, name string) string {
		for _, a := range se.Attr {
			if a.Name.Local == name {
				return a.Value
			}
		}
		return ""
	}
	num := func(se xml.StartElement, name string, def float64) float64 {
		v, err := strconv.ParseFloat(attr(se, name), 64)
		if err != nil {
			return def
		}
		return v
	}
	d := xml.NewDecoder(bytes.NewReader(svg))
	var stack []xml.StartElement
	var cur *svgText
	var pending *svgMark // a line or rect whose <title> is next
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not XML: %v", err)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			stack = append(stack, tk)
			switch tk.Name.Local {
			case "text":
				texts = append(texts, svgText{x: num(tk, "x", 0), y: num(tk, "y", 0), size: num(tk, "font-size", 12), anchor: attr(tk, "text-anchor")})
				cur = &texts[len(texts)-1]
			case "tspan":
				if cur != nil {
					cur.extra += num(tk, "dx", 0)
				}
			case "line":
				if attr(tk, "stroke") == colGrid {
					continue
				}
				x1, y1, x2, y2 := num(tk, "x1", 0), num(tk, "y1", 0), num(tk, "x2", 0), num(tk, "y2", 0)
				w := num(tk, "stroke-width", 1) / 2
				lines = append(lines, svgMark{b: box{min(x1, x2) - w, min(y1, y2) - w, max(x1, x2) + w, max(y1, y2) + w}})
				pending = &lines[len(lines)-1]
			case "rect":
				x, y, w, h := num(tk, "x", 0), num(tk, "y", 0), num(tk, "width", 0), num(tk, "height", 0)
				if w <= 10 && h <= 14 {
					marks = append(marks, svgMark{b: box{x, y, x + w, y + h}})
				}
				steps = append(steps, svgMark{b: box{x, y, x + w, y + h}})
				pending = &steps[len(steps)-1]
			case "circle":
				x, y, r := num(tk, "cx", 0), num(tk, "cy", 0), num(tk, "r", 0)
				marks = append(marks, svgMark{b: box{x - r, y - r, x + r, y + r}})
				pending = &marks[len(marks)-1]
			case "path":
				marks = append(marks, svgMark{b: pathBox(t, attr(tk, "d"))})
				pending = &marks[len(marks)-1]
			}
		case xml.CharData:
			if len(stack) > 0 && stack[len(stack)-1].Name.Local == "title" && pending != nil {
				pending.title += string(tk)
			} else if cur != nil {
				cur.s += string(tk)
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
			switch tk.Name.Local {
			case "text":
				cur = nil
			case "rect", "line", "circle", "path":
				pending = nil
			}
		}
	}
	var stepRects []svgMark
	for _, r := range steps {
		if strings.HasPrefix(r.title, "step ") {
			stepRects = append(stepRects, r)
		}
	}
	return texts, lines, stepRects, marks
}

// pathBox is the bounding box of a path made of M, l, h, v and z, the commands the pictures use.
func pathBox(t *testing.T, d string) box {
	t.Helper()
	toks := strings.Fields(strings.NewReplacer("M", " M ", "l", " l ", "h", " h ", "v", " v ", "z", " z ").Replace(d))
	num := func(i int) float64 {
		if i >= len(toks) {
			t.Fatalf("path %q: a command lacks its numbers", d)
		}
		v, err := strconv.ParseFloat(toks[i], 64)
		if err != nil {
			t.Fatalf("path %q: %v", d, err)
		}
		return v
	}
	var x, y float64
	b := box{math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)}
	for i := 0; i < len(toks); {
		switch toks[i] {
		case "M":
			x, y, i = num(i+1), num(i+2), i+3
		case "l":
			x, y, i = x+num(i+1), y+num(i+2), i+3
		case "h":
			x, i = x+num(i+1), i+2
		case "v":
			y, i = y+num(i+1), i+2
		case "z":
			i++
			continue
		default:
			t.Fatalf("path %q: unknown command %q", d, toks[i])
		}
		b = box{min(b.x1, x), min(b.y1, y), max(b.x2, x), max(b.y2, y)}
	}
	return b
}

// checkGeometry asserts, from the picture's own geometry, that every label lies inside the picture, clear of
// the other labels, of the lines and of the marks, and that every step of o is drawn: as a line, or as a
// rectangle of a visible width that no other step's covers.
func checkGeometry(t *testing.T, name string, o *scenarios.Outcome, svg []byte) {
	t.Helper()
	texts, lines, steps, marks := parseSVG(t, svg)
	if len(texts) == 0 {
		t.Fatalf("%s: no text parsed", name)
	}
	var root struct {
		W float64 `xml:"width,attr"`
		H float64 `xml:"height,attr"`
	}
	if err := xml.Unmarshal(svg, &root); err != nil || root.W == 0 {
		t.Fatalf("%s: no width: %v", name, err)
	}
	// The picture states positions to 0.1 px: boxes that touch may overlap by that much once parsed.
	overlaps := func(a, b box) bool {
		const eps = 0.1
		return a.x1+eps < b.x2 && b.x1+eps < a.x2 && a.y1+eps < b.y2 && b.y1+eps < a.y2
	}
	boxes := make([]box, len(texts))
	for i, tx := range texts {
		boxes[i] = textBox(tx.x, tx.y, tx.anchor, tx.s, tx.size)
		boxes[i].x2 += tx.extra
	}
	for i := range texts {
		if b := boxes[i]; b.x1 < 0 || b.x2 > root.W || b.y1 < 0 || b.y2 > root.H {
			t.Errorf("%s: label %q lies outside the %.0f×%.0f picture", name, texts[i].s, root.W, root.H)
		}
		for j := i + 1; j < len(texts); j++ {
			if overlaps(boxes[i], boxes[j]) {
				t.Errorf("%s: label %q overlaps label %q", name, texts[i].s, texts[j].s)
			}
		}
		for _, l := range lines {
			if overlaps(boxes[i], l.b) {
				t.Errorf("%s: label %q at (%.0f,%.0f) is crossed by a line %+v %s", name, texts[i].s, texts[i].x, texts[i].y, l.b, l.title)
			}
		}
		for _, m := range marks {
			if overlaps(boxes[i], m.b) {
				t.Errorf("%s: label %q at (%.0f,%.0f) is overprinted by a mark %+v %s", name, texts[i].s, texts[i].x, texts[i].y, m.b, m.title)
			}
		}
	}
	for i, r := range o.Steps {
		prefix := "step " + strconv.Itoa(i+1) + ":"
		drawn := false
		for _, l := range lines {
			drawn = drawn || (strings.HasPrefix(l.title, prefix) && isLineStep(r.Step))
		}
		for j, s := range steps {
			if !strings.HasPrefix(s.title, prefix) {
				continue
			}
			if w := s.b.x2 - s.b.x1; w < 4 {
				t.Errorf("%s: %s drawn %.1f px wide", name, prefix, w)
			}
			for k, other := range steps {
				if k != j && overlaps(s.b, other.b) {
					t.Errorf("%s: %s overlaps %s", name, prefix, strings.SplitN(other.title, ":", 2)[0])
				}
			}
			drawn = true
		}
		if !drawn {
			t.Errorf("%s: %s is not drawn", name, prefix)
		}
	}
}

// keeperOutcome is a takeover as the keeper scenarios record it: the FUSE server killed and started again
// 50 ms later, a stall of 3 ms, steps that took no time, and start failures with long messages beside a
// start line.
func keeperOutcome(t *testing.T) *scenarios.Outcome {
	t.Helper()
	sc, err := catalog.Lookup("keeper-server-crash")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	c := sc.Pod.Containers[0].Name
	ev := &scenarios.Evidence{Start: start, Until: at(6000), Paths: map[string]string{}}
	add := func(e scenarios.Event) { ev.Events = append(ev.Events, e) }
	add(scenarios.Event{Time: at(100), Source: scenarios.SrcKubelet, Kind: scenarios.KContainerStarted, Container: c})
	for ms := 200; ms < 6000; ms += 100 {
		e := scenarios.Event{Time: at(ms), Source: scenarios.SrcWorkload, Kind: scenarios.KRead, Container: c, Content: "Hello world!\n"}
		add(e)
	}
	// The read that waited for the takeover: issued just before the kill, answered once the new server serves.
	add(scenarios.Event{Time: at(3052), Source: scenarios.SrcWorkload, Kind: scenarios.KRead, Container: c, Content: "Hello world!\n", Latency: 53 * time.Millisecond})
	add(scenarios.Event{Time: at(3000), Source: scenarios.SrcComponent, Kind: scenarios.KKilled, Component: topology.FuseServer})
	add(scenarios.Event{Time: at(3050), Source: scenarios.SrcComponent, Kind: scenarios.KStarted, Component: topology.FuseServer})
	add(scenarios.Event{Time: at(3052), Source: scenarios.SrcComponent, Kind: scenarios.KReady, Component: topology.FuseServer})
	// A failed start and an exit right where a step line runs (other scenarios have them there).
	code := 1
	add(scenarios.Event{Time: at(3045), Source: scenarios.SrcKubelet, Kind: scenarios.KContainerExited, Container: c, ExitCode: &code})
	add(scenarios.Event{Time: at(3040), Source: scenarios.SrcKubelet, Kind: scenarios.KStartFailed, Container: c,
		Message: `Error: failed to generate container "c349…" spec: failed to stat "/x/volumes/kubernetes.io~csi/pv/mount": transport endpoint is not connected`})
	// The catalog's steps (observe, kill, start, observe), with steps that took no time around them.
	wait, kill, startS, observe := sc.Steps[0], sc.Steps[1], sc.Steps[2], sc.Steps[3]
	steps := []scenarios.StepRecord{
		{Step: wait, Start: at(0), End: at(2000)},
		{Step: wait, Start: at(2000), End: at(2000)}, // no time at all
		{Step: wait, Start: at(2000), End: at(2001)},
		{Step: kill, Start: at(3000), End: at(3000)},
		{Step: startS, Start: at(3050), End: at(3052)},
		{Step: observe, Start: at(3052), End: at(3052)},
		{Step: observe, Start: at(3052), End: at(6000)},
	}
	if kill.Action != scenarios.ActKill || startS.Action != scenarios.ActStart {
		t.Fatalf("keeper-server-crash's steps changed: %+v", sc.Steps)
	}
	o := &scenarios.Outcome{Scenario: sc, Backend: "fake", Kubelet: scenarios.MustKubeletVersion("v1.37.2"), Start: start, End: at(6000), Evidence: ev, Steps: steps}
	o.Measures = ev.Measure(c)
	return o
}

// lateStallOutcome is keeperOutcome with a slower read long after the takeover (another container's, as real
// runs have them): the report's stall is that read, not the one the zoomed strip shows.
func lateStallOutcome(t *testing.T) *scenarios.Outcome {
	t.Helper()
	o := keeperOutcome(t)
	ev := o.Evidence
	late := ev.Start.Add(5 * time.Second)
	ev.Events = append(ev.Events, scenarios.Event{Time: late, Source: scenarios.SrcWorkload, Kind: scenarios.KRead,
		Container: o.Scenario.Pod.Containers[0].Name, Content: scenarios.Content, Latency: 80 * time.Millisecond})
	ev.Sort()
	o.Measures = ev.Measure(o.Scenario.Pod.Containers[0].Name)
	return o
}

// catalogBackend plays every component a catalog row kills, starts or upgrades, on top of
// scenariotest.Backend, whose Setup deploys the run (the plugin serving, the volume dir alive, a reader
// reading) and whose name, timing and teardown it keeps; scenariotest.Backend itself knows only the plugin
// container. It tells the same story of each component, so that every row's steps run to their end and its
// picture has the marks a real run has: reads that fail or wait for the component, exits, failed starts
// again after a back-off, restarts, stat of the volume dir. The verdicts mean nothing here; the pictures'
// layout is what is tested.
type catalogBackend struct {
	scenariotest.Backend
	sc     *scenarios.Scenario
	rec    *scenarios.Recorder
	killed time.Time
	inst   map[string]int  // the running instance of each container
	exited map[string]bool // containers that exited after a kill
}

func (b *catalogBackend) add(e scenarios.Event) { b.rec.Add(e) }

func (b *catalogBackend) Setup(ctx context.Context, sc *scenarios.Scenario, env *scenarios.Env) error {
	b.sc, b.rec, b.inst, b.exited = sc, env.Rec, map[string]int{}, map[string]bool{}
	if err := b.Backend.Setup(ctx, sc, env); err != nil { // the plugin serves, the volume dir is alive, "reader" reads
		return err
	}
	for _, c := range sc.Components() {
		b.add(scenarios.Event{Source: scenarios.SrcComponent, Component: c, Kind: scenarios.KStarted})
		b.add(scenarios.Event{Source: scenarios.SrcComponent, Component: c, Kind: scenarios.KReady})
	}
	b.add(scenarios.Event{Source: scenarios.SrcProbe, Kind: scenarios.KProbe, Path: scenarios.PathStaging})
	for _, c := range sc.Pod.Containers {
		if c.Name == "reader" {
			continue // scenariotest.Backend started it
		}
		b.add(scenarios.Event{Source: scenarios.SrcKubelet, Kind: scenarios.KContainerStarted, Container: c.Name})
		for range 3 {
			b.add(scenarios.Event{Source: scenarios.SrcWorkload, Kind: scenarios.KRead, Container: c.Name, Content: scenarios.Content})
		}
	}
	return nil
}

// settle is how long a component takes to die or to serve again: the reads that fail or wait spread over
// the picture as they do in a real run.
const settle = 40 * time.Millisecond

// Kill kills c: every container's next read fails, and those that exit on an error exit and fail to start
// again on the dead volume dir, again after a back-off.
func (b *catalogBackend) Kill(ctx context.Context, c topology.Component) error {
	b.killed = time.Now()
	b.add(scenarios.Event{Source: scenarios.SrcComponent, Component: c, Kind: scenarios.KKilled})
	if err := scenarios.Sleep(ctx, settle); err != nil {
		return err
	}
	var exited []scenarios.Container
	for _, ct := range b.sc.Pod.Containers {
		n := b.inst[ct.Name]
		b.add(scenarios.Event{Source: scenarios.SrcWorkload, Kind: scenarios.KReadError, Container: ct.Name, Instance: n, Errno: "ENOTCONN"})
		if ct.ExitOnError && !b.exited[ct.Name] {
			b.exited[ct.Name] = true
			exited = append(exited, ct)
			b.add(scenarios.Event{Source: scenarios.SrcKubelet, Kind: scenarios.KContainerExited, Container: ct.Name, Instance: n, ExitCode: scenarios.IntPtr(scenarios.RestartAllExitCode)})
		}
	}
	b.add(scenarios.Event{Source: scenarios.SrcProbe, Kind: scenarios.KProbe, Path: scenarios.PathVolume, Errno: "ENOTCONN"})
	for try := range 2 {
		if len(exited) == 0 {
			break
		}
		if try > 0 {
			if err := scenarios.Sleep(ctx, b.Timing().BackoffBase); err != nil {
				return err
			}
		}
		for _, ct := range exited {
			b.add(scenarios.Event{Source: scenarios.SrcKubelet, Kind: scenarios.KStartFailed, Container: ct.Name, Instance: b.inst[ct.Name] + 1, Errno: "ENOTCONN",
				Message: `Error: failed to generate container "x" spec: failed to generate spec: failed to stat "/k/v": stat /k/v: transport endpoint is not connected`})
		}
	}
	return nil
}

// Start starts c again: the volume dir is alive, the containers that exited start again, and every
// container reads, the first read having waited since the kill.
func (b *catalogBackend) Start(ctx context.Context, c topology.Component) error {
	b.add(scenarios.Event{Source: scenarios.SrcComponent, Component: c, Kind: scenarios.KStarted})
	if err := scenarios.Sleep(ctx, settle); err != nil {
		return err
	}
	b.add(scenarios.Event{Source: scenarios.SrcComponent, Component: c, Kind: scenarios.KReady})
	b.add(scenarios.Event{Source: scenarios.SrcProbe, Kind: scenarios.KProbe, Path: scenarios.PathVolume})
	b.reads()
	return nil
}

// Upgrade replaces c: a new build serves, and the reads wait for the handover.
func (b *catalogBackend) Upgrade(ctx context.Context, c topology.Component) error {
	b.killed = time.Now()
	b.add(scenarios.Event{Source: scenarios.SrcComponent, Component: c, Kind: scenarios.KUpgraded, Detail: "next"})
	b.add(scenarios.Event{Source: scenarios.SrcComponent, Component: c, Kind: scenarios.KStarted})
	if err := scenarios.Sleep(ctx, settle); err != nil {
		return err
	}
	b.add(scenarios.Event{Source: scenarios.SrcComponent, Component: c, Kind: scenarios.KReady})
	b.reads()
	return nil
}

func (b *catalogBackend) reads() {
	now := time.Now()
	for _, ct := range b.sc.Pod.Containers {
		if b.exited[ct.Name] {
			b.exited[ct.Name] = false
			b.inst[ct.Name]++
			b.add(scenarios.Event{Time: now, Source: scenarios.SrcKubelet, Kind: scenarios.KContainerStarted, Container: ct.Name, Instance: b.inst[ct.Name]})
		}
		b.add(scenarios.Event{Time: now, Source: scenarios.SrcWorkload, Kind: scenarios.KRead, Container: ct.Name, Instance: b.inst[ct.Name],
			Content: scenarios.Content, Latency: now.Sub(b.killed)})
	}
}

// quick bounds every wait and observation of sc by stepTime, so that a row runs within about a second, the
// least span of a picture, as a real run fills it; the steps, their order and labels stay the catalog's.
func quick(sc scenarios.Scenario) scenarios.Scenario {
	const stepTime = 200 * time.Millisecond
	sc.Steps = slices.Clone(sc.Steps)
	for i := range sc.Steps {
		sc.Steps[i].Timeout = scenarios.Dur{Fixed: stepTime}
		sc.Steps[i].For = scenarios.Dur{Fixed: stepTime}
	}
	return sc
}

// catalogOutcomes runs every row of the catalog, the driver-agnostic rows included, on catalogBackend, all at
// once (a run mostly waits). Every row is covered: a row that runs on one backend only (the relay rows: local;
// the driver rows: kube) runs under that backend's name, since the fake backend plays whatever it is told.
func catalogOutcomes(t *testing.T) map[string]*scenarios.Outcome {
	t.Helper()
	rows := slices.Concat(catalog.All(), catalog.Drivers())
	outs := make([]*scenarios.Outcome, len(rows))
	var wg sync.WaitGroup
	for i, sc := range rows {
		dir := t.TempDir()
		wg.Go(func() {
			b := &catalogBackend{}
			if len(sc.Backends) > 0 {
				b.BackendName = sc.Backends[0]
			}
			outs[i] = scenarios.Run(context.Background(), b, quick(sc), scenarios.RunOptions{Dir: dir, Poll: 10 * time.Millisecond})
		})
	}
	wg.Wait()
	m := map[string]*scenarios.Outcome{}
	for i, o := range outs {
		// Every step ran: the picture is the whole row's.
		if o.Err != nil || len(o.Steps) != len(rows[i].Steps) {
			t.Errorf("%s: %d of %d steps ran: %v", rows[i].Name, len(o.Steps), len(rows[i].Steps), o.Err)
		}
		m["catalog/"+rows[i].Name] = o
	}
	return m
}

// stallCell is the stall as the report's Measured table states it: the column's heading and the figure.
func stallCell(t *testing.T, o *scenarios.Outcome) (words, figure string) {
	t.Helper()
	lines := strings.Split(Markdown(o, RecordOf(o)), "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "| kill → first ENOTCONN |") || i+2 >= len(lines) {
			continue
		}
		head, row := strings.Split(l, "|"), strings.Split(lines[i+2], "|")
		for j, h := range head {
			if strings.Contains(h, "(stall)") && j < len(row) {
				return strings.TrimSpace(h), strings.TrimSpace(row[j])
			}
		}
	}
	t.Fatalf("the report has no stall in its Measured table:\n%s", Markdown(o, RecordOf(o)))
	return "", ""
}

// checkStallText asserts that a zoomed strip states the stall once, in the report's words and with the
// report's figure: one fact, one figure.
func checkStallText(t *testing.T, name string, o *scenarios.Outcome, svg []byte) {
	t.Helper()
	words, want := stallCell(t, o)
	texts, _, _, _ := parseSVG(t, svg)
	var stalls []string
	in := false
	for _, tx := range texts {
		switch {
		case strings.HasPrefix(tx.s, "zoomed: "):
			in = true
		case tx.s == "ms since the kill":
			in = false
		}
		if in && strings.Contains(tx.s, "stall") {
			stalls = append(stalls, tx.s)
		}
	}
	if len(stalls) != 1 {
		t.Errorf("%s: the zoomed strip states the stall %d times: %q; the report: %s %s", name, len(stalls), stalls, words, want)
		return
	}
	// The figure follows the report's words, and a comma or a colon may follow it.
	_, fig, ok := strings.Cut(stalls[0], words+" ")
	if f := strings.Fields(fig); len(f) > 0 {
		fig = strings.TrimRight(f[0], ",:")
	}
	if !ok || fig != want {
		t.Errorf("%s: the zoomed strip says %q, the report's Measured table %s %s", name, stalls[0], words, want)
	}
}

// TestTimelineGeometry checks the pictures from their own geometry: the restart and the keeper takeover, and
// the picture of every row of the catalog. With DFC_SVG_DIR=DIR it also writes them there for a person to look
// at (rsvg-convert renders them as PNG).
func TestTimelineGeometry(t *testing.T) {
	outcomes := catalogOutcomes(t)
	outcomes["restart"] = scenarios.Run(context.Background(), &scenariotest.Backend{RestartRecovers: true}, restartScenario(t), scenarios.RunOptions{Dir: t.TempDir(), Poll: time.Millisecond})
	outcomes["keeper"] = keeperOutcome(t)
	outcomes["keeper-late-stall"] = lateStallOutcome(t)
	for _, name := range []string{"keeper", "keeper-late-stall"} {
		if _, ok := zoomWindow(outcomes[name]); !ok {
			t.Errorf("%s: a takeover 50 ms after the kill gets no zoomed strip", name)
		}
	}
	// Where the stall's read lies in the strip, it is marked; where it does not, the strip says where it is and
	// marks the read that waited longest across the takeover under another name.
	for name, want := range map[string][]string{
		"keeper":            {"the stall: the longest open or read after the kill took 53ms", "53.0ms: the orange bar"},
		"keeper-late-stall": {"80.0ms, at t+5.00s: outside this window", ">longest read in this window 53.0ms<"},
	} {
		svg := string(TimelineSVG(outcomes[name], RecordOf(outcomes[name])))
		for _, w := range want {
			if !strings.Contains(svg, w) {
				t.Errorf("%s: the zoomed strip lacks %q", name, w)
			}
		}
	}
	zoomed := 0
	for name, o := range outcomes {
		svg := TimelineSVG(o, RecordOf(o))
		checkGeometry(t, name, o, svg)
		if _, ok := zoomWindow(o); ok {
			checkStallText(t, name, o, svg)
			zoomed++
		}
		if dir := os.Getenv("DFC_SVG_DIR"); dir != "" {
			if err := os.WriteFile(filepath.Join(dir, strings.ReplaceAll(name, "/", "-")+".svg"), svg, 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	// The keeper rows start the server again right after the kill, the strip follows: some catalog rows have
	// one besides the two built by hand (how many depends on the machine's timing).
	if zoomed < 3 {
		t.Errorf("%d of the pictures have a zoomed strip; want the two keeper takeovers and some of the catalog's", zoomed)
	}
}
