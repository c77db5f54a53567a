package report

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/scenariotest"
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

// parseSVG reads the texts, the lines (gridlines excepted: they sit behind everything) and the rectangles
// with a "step N:" tooltip of a picture.
func parseSVG(t *testing.T, svg []byte) (texts []svgText, lines, steps []svgMark) {
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
				x, y := num(tk, "x", 0), num(tk, "y", 0)
				steps = append(steps, svgMark{b: box{x, y, x + num(tk, "width", 0), y + num(tk, "height", 0)}})
				pending = &steps[len(steps)-1]
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
			case "rect", "line":
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
	return texts, lines, stepRects
}

// checkGeometry asserts, from the picture's own geometry, that no label overlaps a line or another label
// and that every step of o is drawn: as a line, or as a rectangle of a visible width that no other step's
// covers.
func checkGeometry(t *testing.T, name string, o *scenarios.Outcome, svg []byte) {
	t.Helper()
	texts, lines, steps := parseSVG(t, svg)
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
			if boxes[i].overlaps(boxes[j]) {
				t.Errorf("%s: label %q overlaps label %q", name, texts[i].s, texts[j].s)
			}
		}
		for _, l := range lines {
			if boxes[i].overlaps(l.b) {
				t.Errorf("%s: label %q at (%.0f,%.0f) is crossed by a line %+v %s", name, texts[i].s, texts[i].x, texts[i].y, l.b, l.title)
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
				if k != j && s.b.overlaps(other.b) {
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
	add(scenarios.Event{Time: at(3000), Source: scenarios.SrcComponent, Kind: scenarios.KKilled, Component: scenarios.FuseServer})
	add(scenarios.Event{Time: at(3050), Source: scenarios.SrcComponent, Kind: scenarios.KStarted, Component: scenarios.FuseServer})
	add(scenarios.Event{Time: at(3052), Source: scenarios.SrcComponent, Kind: scenarios.KReady, Component: scenarios.FuseServer})
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

// TestTimelineGeometry checks the pictures from their own geometry. With DFC_SVG_DIR=DIR it also writes them
// there for a person to look at (rsvg-convert renders them as PNG).
func TestTimelineGeometry(t *testing.T) {
	restart := scenarios.Run(context.Background(), &scenariotest.Backend{RestartRecovers: true}, restartScenario(t), scenarios.RunOptions{Dir: t.TempDir(), Poll: time.Millisecond})
	keeper := keeperOutcome(t)
	if _, ok := zoomWindow(keeper); !ok {
		t.Error("a takeover 50 ms after the kill gets no zoomed strip")
	}
	for name, o := range map[string]*scenarios.Outcome{"restart": restart, "keeper": keeper} {
		svg := TimelineSVG(o)
		checkGeometry(t, name, o, svg)
		if dir := os.Getenv("DFC_SVG_DIR"); dir != "" {
			if err := os.WriteFile(filepath.Join(dir, name+".svg"), svg, 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	svg := string(TimelineSVG(keeper))
	if !strings.Contains(svg, "zoomed: ") || !strings.Contains(svg, "stall 53.0 ms") {
		t.Errorf("the keeper picture lacks the zoomed strip or the marked stall")
	}
}
