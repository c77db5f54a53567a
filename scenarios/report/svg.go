package report

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// Colours of the timeline picture.
const (
	colGood    = "#2e9d4f"
	colBad     = "#d64545"
	colStart   = "#3b6fd6"
	colExit    = "#222222"
	colFail    = "#e08a1e"
	colUp      = "#a8dcae"
	colDown    = "#f4bcbc"
	colWarm    = "#f6dd9b"
	colRun     = "#dbe6fb"
	colGrid    = "#e6e6e6"
	colText    = "#333333"
	colSubtle  = "#777777"
	colKill    = "#c62828"
	colRestart = "#2e7d32"
)

// svgLayout holds the geometry of the picture.
type svgLayout struct {
	width, left, right float64
	t0                 time.Time
	span               float64 // seconds shown
}

func (l svgLayout) x(t time.Time) float64 {
	s := t.Sub(l.t0).Seconds()
	s = math.Max(0, math.Min(s, l.span))
	return l.left + s/l.span*(l.width-l.left-l.right)
}

type svgBuf struct{ bytes.Buffer }

func (b *svgBuf) f(format string, args ...any) { fmt.Fprintf(&b.Buffer, format, args...) }

// text writes an escaped text element.
func (b *svgBuf) text(x, y float64, attrs, s string) {
	b.f(`<text x="%.1f" y="%.1f" %s>`, x, y, attrs)
	_ = xml.EscapeText(&b.Buffer, []byte(s))
	b.f("</text>\n")
}

// title writes a tooltip child element.
func (b *svgBuf) title(s string) {
	b.f("<title>")
	_ = xml.EscapeText(&b.Buffer, []byte(s))
	b.f("</title>")
}

// box is the rectangle a label takes: x1..x2, y1..y2.
type box struct{ x1, y1, x2, y2 float64 }

func (a box) overlaps(b box) bool { return a.x1 < b.x2 && b.x1 < a.x2 && a.y1 < b.y2 && b.y1 < a.y2 }

// textBox is where text of size px drawn at x, y with the given anchor lies (ascent 0.8 em, descent 0.2 em).
func textBox(x, y float64, anchor, s string, px float64) box {
	w := textWidth(s, px)
	switch anchor {
	case "end":
		x -= w
	case "middle":
		x -= w / 2
	}
	return box{x, y - 0.8*px, x + w, y + 0.2*px}
}

// placer keeps labels clear of each other, of the step lines that cross every lane and of the marks of
// events: a label goes where it overlaps nothing placed, or is left out (its mark keeps the full text as a
// tooltip). Every text of the picture goes through it: those whose place is fixed (titles, lane labels, axes)
// are drawn with fixed, which reserves their room, so that no label is placed over them.
type placer struct {
	b      *svgBuf
	width  float64 // of the picture: a label must fit inside
	placed []box
	marks  []box // lines (as thin boxes) and marks that labels keep clear of
}

// fixed draws s where it belongs, anchored at x, and reserves its room.
func (p *placer) fixed(x, y, px float64, anchor, attrs, s string) {
	p.placed = append(p.placed, textBox(x, y, anchor, s, px))
	p.b.text(x, y, fmt.Sprintf(`text-anchor="%s" font-size="%g" %s`, anchor, px, attrs), s)
}

// label draws s at the first of the candidate positions (x, anchor) on baseline y that is free; false if none.
func (p *placer) label(y, px float64, attrs, s string, cands ...candidate) bool {
	for _, c := range cands {
		bx := textBox(c.x, y, c.anchor, s, px)
		if p.free(bx) {
			p.placed = append(p.placed, bx)
			p.b.text(c.x, y, fmt.Sprintf(`text-anchor="%s" font-size="%g" %s`, c.anchor, px, attrs), s)
			return true
		}
	}
	return false
}

func (p *placer) free(bx box) bool {
	if bx.x1 < 0 || bx.x2 > p.width {
		return false
	}
	for _, o := range p.placed {
		if bx.overlaps(o) {
			return false
		}
	}
	// textWidth is an estimate: keep 3 px from a line or mark.
	wide := box{bx.x1 - 3, bx.y1, bx.x2 + 3, bx.y2}
	for _, o := range p.marks {
		if wide.overlaps(o) {
			return false
		}
	}
	return true
}

type candidate struct {
	x      float64
	anchor string
}

func right(x float64) candidate  { return candidate{x, "start"} }
func left(x float64) candidate   { return candidate{x, "end"} }
func middle(x float64) candidate { return candidate{x, "middle"} }

// The picture's width and left margin when every lane label fits in that margin. A longer lane label widens
// both by what it needs, so that the plot keeps its width and no label is cut at the picture's left edge.
const (
	baseWidth = 1100.0
	baseLeft  = 170.0
	laneGap   = 10.0 // from a lane's label to the plot
)

// The kill and start labels go above the lanes in up to stepRows rows, stepRowH apart, all of them below the
// title and the subtitle.
const (
	stepRows = 4
	stepRowH = 13.0
)

// TimelineSVG draws the run: the life of each component the steps kill and start, stat of the host volume and staging dirs, and for each
// container its instances with every read (good / failed), starts, exits and failed starts, against the
// plugin kill and restart as vertical lines, with the measured intervals and a time axis. The stall it names
// is its record's (rec, RecordOf), in the report's words.
func TimelineSVG(o *scenarios.Outcome, rec Record) []byte {
	ev := o.Evidence
	if ev == nil {
		ev = &scenarios.Evidence{Start: o.Start, Until: o.End}
	}
	span := ev.Until.Sub(ev.Start).Seconds()
	if span < 1 {
		span = 1
	}
	comps := o.Scenario.Components()
	var lanes []string
	for _, c := range comps {
		lanes = append(lanes, c.Noun())
	}
	lanes = append(lanes, "host volume dir", "host staging dir")
	for _, c := range o.Scenario.Pod.Containers {
		lanes = append(lanes, "container "+c.Name)
	}
	margin := baseLeft
	for _, name := range lanes {
		margin = max(margin, 16+textWidth(name, 12)+laneGap)
	}
	l := svgLayout{width: baseWidth - baseLeft + margin, left: margin, right: 30, t0: ev.Start, span: span}
	const laneH = 40.0
	const stepsH = 26.0
	// The subtitle's baseline is at 42: the highest row of step labels starts below it.
	stepsTop := 50 + stepRows*stepRowH
	top := stepsTop + stepsH
	measures := measureArrows(o)
	plotBottom := top + float64(len(lanes))*laneH
	axisY := plotBottom + 8
	measY := axisY + 40
	zoomY := measY + float64(len(measures))*22 + 10
	zoom, zoomed := zoomWindow(o)
	legendY := zoomY + 14
	if zoomed {
		legendY += zoomH
	}
	height := legendY + 46

	var b svgBuf
	b.f(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	b.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		l.width, height, l.width, height)
	b.f(`<rect x="0" y="0" width="%.0f" height="%.0f" fill="#ffffff"/>`+"\n", l.width, height)
	p := &placer{b: &b, width: l.width}
	for _, x := range stepLineXs(l, o) {
		p.marks = append(p.marks, box{x - 1.5, stepsTop - 4, x + 1.5, plotBottom})
	}

	// Title.
	result, resCol := o.Result(), colBad
	if o.Passed() {
		resCol = colGood
	}
	b.f(`<text x="16" y="24" font-size="16" font-weight="bold" fill="%s">scenario `, colText)
	_ = xml.EscapeText(&b.Buffer, []byte(o.Scenario.Name))
	b.f(`<tspan dx="10" fill="%s">%s</tspan></text>`+"\n", resCol, result)
	tb := textBox(16, 24, "start", "scenario "+o.Scenario.Name+result, 16)
	tb.x2 += 10 // the tspan's dx
	p.placed = append(p.placed, tb)
	facts := fmt.Sprintf(" · kubelet %s · backend %s · read interval %s · restart back-off %s", o.Kubelet, o.Backend, o.Timing.ReadInterval, o.Timing.BackoffBase)
	title := []rune(o.Scenario.Title)
	for len(title) > 0 && textWidth(string(title)+"…"+facts, 12) > l.width-32 {
		title = title[:len(title)-1]
	}
	if len(title) < len([]rune(o.Scenario.Title)) {
		title = append(title, '…') // the report's heading has it whole
	}
	p.fixed(16, 42, 12, "start", `fill="`+colSubtle+`"`, string(title)+facts)

	// Lanes: labels and zebra background.
	for i, name := range lanes {
		y := top + float64(i)*laneH
		if i%2 == 0 {
			b.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#fafafa"/>`+"\n", l.left, y, l.width-l.left-l.right, laneH)
		}
		p.fixed(l.left-laneGap, y+laneH/2+4, 12, "end", `fill="`+colText+`"`, name)
	}
	b.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#bbbbbb"/>`+"\n", l.left, top, l.left, plotBottom)

	// Time axis with gridlines.
	step := tickStep(span)
	for s := 0.0; s <= span+1e-9; s += step {
		x := l.left + s/span*(l.width-l.left-l.right)
		b.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x, top, x, plotBottom, colGrid)
		b.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888888"/>`+"\n", x, axisY, x, axisY+5)
		p.fixed(x, axisY+18, 12, "middle", `fill="`+colSubtle+`"`, trimFloat(s)+"s")
	}
	b.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888888"/>`+"\n", l.left, axisY, l.width-l.right, axisY)
	p.fixed(l.left-22, axisY+18, 12, "end", `fill="`+colSubtle+`"`, "seconds since start")

	for i, c := range comps {
		drawComponent(&b, p, l, ev, c, top+float64(i)*laneH, laneH)
	}
	first := len(comps)
	drawProbe(&b, p, l, ev, scenarios.PathVolume, top+float64(first)*laneH, laneH)
	drawProbe(&b, p, l, ev, scenarios.PathStaging, top+float64(first+1)*laneH, laneH)
	for i, c := range o.Scenario.Pod.Containers {
		drawContainer(&b, p, l, ev, c.Name, top+float64(first+2+i)*laneH, laneH)
	}
	drawSteps(&b, p, l, o, stepsTop, stepsH, plotBottom)

	// Measured intervals as arrows below the axis, each labelled after its head, else before its tail, else
	// above its middle (an arrow too wide for either is wider than its label).
	for i, m := range measures {
		y := measY + float64(i)*22
		x1, x2 := l.x(m.from), l.x(m.to)
		b.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"/>`+"\n", x1, y, x2, y, m.color)
		b.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"/>`+"\n", x1, y-5, x1, y+5, m.color)
		b.f(`<path d="M%.1f %.1f l-7 -4 v8 z" fill="%s"/>`+"\n", x2, y, m.color)
		p.marks = append(p.marks, box{x1, y - 1, x2, y + 1}, box{x1 - 1, y - 5, x1 + 1, y + 5}, box{x2 - 7, y - 4, x2, y + 4})
		attrs := `fill="` + m.color + `"`
		if !p.label(y+4, 12, attrs, m.label, right(x2+8), left(x1-8)) {
			p.label(y-5, 12, attrs, m.label, middle((x1+x2)/2))
		}
	}

	if zoomed {
		drawZoom(p, l, o, rec.Measured, zoom, zoomY)
	}
	drawLegend(p, legendY)
	b.f("</svg>\n")
	return b.Bytes()
}

type measureArrow struct {
	from, to time.Time
	label    string
	color    string
}

func measureArrows(o *scenarios.Outcome) []measureArrow {
	ev := o.Evidence
	if ev == nil {
		return nil
	}
	var out []measureArrow
	m := o.Measures
	if started, _, _ := ev.SidecarServes(""); m.SidecarToRead > 0 && !started.IsZero() {
		out = append(out, measureArrow{started, started.Add(m.SidecarToRead), "sidecar start → first good read " + FormatMeasure(m.SidecarToRead), colSubtle})
	}
	k, ok := ev.KillTime()
	if !ok {
		return out
	}
	if m.KillToError > 0 {
		out = append(out, measureArrow{k, k.Add(m.KillToError), "kill → first ENOTCONN " + FormatMeasure(m.KillToError), colBad})
	}
	if m.KillToRestore > 0 {
		out = append(out, measureArrow{k, k.Add(m.KillToRestore), "kill → volume dir restored " + FormatMeasure(m.KillToRestore), colSubtle})
	}
	if m.KillToRecovery > 0 {
		out = append(out, measureArrow{k, k.Add(m.KillToRecovery), "kill → first good read again " + FormatMeasure(m.KillToRecovery), colGood})
	}
	return out
}

// drawComponent draws the life of component c: starting, serving, down.
func drawComponent(b *svgBuf, p *placer, l svgLayout, ev *scenarios.Evidence, c topology.Component, y, h float64) {
	type seg struct {
		from  time.Time
		state string
	}
	var segs []seg
	state := func() string {
		if len(segs) == 0 {
			return ""
		}
		return segs[len(segs)-1].state
	}
	set := func(t time.Time, st string) {
		if state() != st {
			segs = append(segs, seg{t, st})
		}
	}
	// Instances can overlap (an upgrade starts the new one before the old one exits): the component is down
	// when it is killed, or when its last running instance exited.
	running := 0
	for _, e := range ev.Events {
		if e.Component != c {
			continue
		}
		switch e.Kind {
		case scenarios.KStarted:
			running++
			if state() != "serving" {
				set(e.Time, "starting")
			}
		case scenarios.KReady:
			set(e.Time, "serving")
		case scenarios.KKilled:
			set(e.Time, "down")
		case scenarios.KExited:
			if running--; running <= 0 {
				running = 0
				set(e.Time, "down")
			}
		}
	}
	colors := map[string]string{"starting": colWarm, "serving": colUp, "down": colDown}
	for i, s := range segs {
		end := ev.Until
		if i+1 < len(segs) {
			end = segs[i+1].from
		}
		x1, x2 := l.x(s.from), l.x(end)
		b.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" rx="2">`, x1, y+12, math.Max(x2-x1, 1), h-24, colors[s.state])
		b.title(fmt.Sprintf("%s %s from %s", c, s.state, ev.Since(s.from)))
		b.f("</rect>\n")
		if x2-x1 > textWidth(s.state, 11)+10 {
			p.label(y+h/2+4, 11, `fill="`+colText+`"`, s.state, right(x1+5))
		}
	}
}

func drawProbe(b *svgBuf, p *placer, l svgLayout, ev *scenarios.Evidence, label string, y, h float64) {
	var probes []scenarios.Event
	for _, e := range ev.Events {
		if e.Kind == scenarios.KProbe && e.Path == label {
			probes = append(probes, e)
		}
	}
	for i, pr := range probes {
		end := ev.Until
		if i+1 < len(probes) {
			end = probes[i+1].Time
		}
		x1, x2 := l.x(pr.Time), l.x(end)
		col, state := colUp, "stat ok"
		if pr.Errno != "" {
			col, state = colDown, "stat: "+pr.Errno
		}
		b.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" rx="2">`, x1, y+12, math.Max(x2-x1, 1), h-24, col)
		b.title(fmt.Sprintf("%s dir %s from %s", label, state, ev.Since(pr.Time)))
		b.f("</rect>\n")
		if x2-x1 > textWidth(state, 11)+10 {
			p.label(y+h/2+4, 11, `fill="`+colText+`"`, state, right(x1+5))
		}
	}
}

func drawContainer(b *svgBuf, p *placer, l svgLayout, ev *scenarios.Evidence, name string, y, h float64) {
	mid := y + h/2
	// The labels are placed once every mark of the lane is drawn and kept clear of: a label placed as its
	// event comes would be overprinted by the marks of the events after it (the next failed start, the next
	// exit). Each label starts more than the placer's 3 px from its own mark. Reads (dots, error bars) sit on
	// the middle line, which no label reaches.
	var labels []func()
	mark := func(bx box) { p.marks = append(p.marks, bx) }
	// Instance bars: started → exited.
	bar := func(from, to time.Time, inst int) {
		if x1, x2 := instanceBar(b, l, ev, from, to, inst, mid); x2-x1 > 30 {
			labels = append(labels, func() { p.label(mid-10, 10, `fill="`+colStart+`"`, fmt.Sprintf("#%d", inst), right(x1+13)) })
		}
	}
	var startT *time.Time
	inst := 0
	for _, e := range ev.Events {
		if e.Container != name || e.Source != scenarios.SrcKubelet {
			continue
		}
		switch e.Kind {
		case scenarios.KContainerStarted:
			t := e.Time
			startT, inst = &t, e.Instance
		case scenarios.KContainerExited:
			if startT != nil {
				bar(*startT, e.Time, inst)
				startT = nil
			}
		}
	}
	if startT != nil {
		bar(*startT, ev.Until, inst)
	}
	// Failed starts in a row of the same kind: their kind is named once, beside the first of them that has
	// room for it.
	type failures struct {
		class string
		xs    []float64
	}
	var runs []failures
	for _, e := range ev.Events {
		if e.Container != name {
			continue
		}
		x := l.x(e.Time)
		switch {
		case e.IsGoodIO():
			b.f(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s">`, x, mid, colGood)
			b.title(fmt.Sprintf("%s %s at %s", e.Who(), scenarios.EventText(e), ev.Since(e.Time)))
			b.f("</circle>\n")
		case e.IsWorkloadError():
			b.f(`<rect x="%.1f" y="%.1f" width="3" height="14" fill="%s">`, x-1.5, mid-7, colBad)
			b.title(fmt.Sprintf("%s %s %s at %s: %s", e.Who(), e.Kind, e.Errno, ev.Since(e.Time), e.Message))
			b.f("</rect>\n")
		case e.Kind == scenarios.KContainerStarted:
			b.f(`<path d="M%.1f %.1f l9 6 l-9 6 z" fill="%s">`, x, y+2, colStart)
			b.title(fmt.Sprintf("%s started at %s", e.Who(), ev.Since(e.Time)))
			b.f("</path>\n")
			mark(box{x, y + 2, x + 9, y + 14})
		case e.Kind == scenarios.KContainerExited:
			code := 0
			if e.ExitCode != nil {
				code = *e.ExitCode
			}
			b.f(`<rect x="%.1f" y="%.1f" width="9" height="9" fill="%s">`, x-4.5, y+h-11, colExit)
			b.title(fmt.Sprintf("%s exited with code %d at %s", e.Who(), code, ev.Since(e.Time)))
			b.f("</rect>\n")
			mark(box{x - 4.5, y + h - 11, x + 4.5, y + h - 2})
			labels = append(labels, func() {
				p.label(y+h-3, 10, `fill="`+colExit+`"`, fmt.Sprintf("exit %d", code), right(x+8), left(x-8))
			})
		case e.Kind == scenarios.KStartFailed:
			b.f(`<path d="M%.1f %.1f l6 6 l-6 6 l-6 -6 z" fill="%s" stroke="#ffffff" stroke-width="0.8">`, x, y+2, colFail)
			b.title(fmt.Sprintf("start of %s failed at %s: %s", name, ev.Since(e.Time), scenarios.Shorten(ev, e.Message)))
			b.f("</path>\n")
			mark(box{x - 6, y + 2, x + 6, y + 14})
			if cls := failureClass(e.Message); len(runs) == 0 || runs[len(runs)-1].class != cls {
				runs = append(runs, failures{class: cls})
			}
			runs[len(runs)-1].xs = append(runs[len(runs)-1].xs, x)
		}
	}
	for _, f := range labels {
		f()
	}
	for _, r := range runs {
		for _, x := range r.xs {
			if p.label(y+11, 10, `fill="#a35f0c"`, r.class, right(x+10), left(x-10)) {
				break
			}
		}
	}
}

// instanceBar draws the bar of a container instance and returns where it begins and ends.
func instanceBar(b *svgBuf, l svgLayout, ev *scenarios.Evidence, from, to time.Time, inst int, mid float64) (x1, x2 float64) {
	x1, x2 = l.x(from), l.x(to)
	b.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="16" fill="%s" rx="3">`, x1, mid-8, math.Max(x2-x1, 1), colRun)
	b.title(fmt.Sprintf("instance #%d running %s → %s", inst, ev.Since(from), ev.Since(to)))
	b.f("</rect>\n")
	return x1, x2
}

// minStepWidth is the least width of a step in the steps lane: a step that took no time stays visible.
const minStepWidth = 6.0

// stepLineXs are the x positions of the steps drawn as lines across every lane (kills, starts, upgrades).
func stepLineXs(l svgLayout, o *scenarios.Outcome) []float64 {
	var xs []float64
	for _, r := range o.Steps {
		if isLineStep(r.Step) {
			xs = append(xs, l.x(r.Start))
		}
	}
	return xs
}

func isLineStep(st scenarios.Step) bool {
	return st.Action == scenarios.ActKill || st.Action == scenarios.ActStart || st.Action == scenarios.ActUpgrade
}

// drawSteps draws the scenario's steps as a lane of segments (waits and observations, at least minStepWidth
// wide, labelled when there is room, with the full description as tooltip) and the kills, starts and
// upgrades as bold dashed lines across every lane, labelled above the picture in as many rows as they need.
func drawSteps(b *svgBuf, p *placer, l svgLayout, o *scenarios.Outcome, y, h, bottom float64) {
	p.fixed(l.left-laneGap, y+h/2+4, 12, "end", `fill="`+colSubtle+`"`, "scenario steps")
	type label struct {
		x     float64
		text  string
		color string
	}
	var labels []label
	prevEnd := -1e9
	for i, r := range o.Steps {
		x1, x2 := l.x(r.Start), l.x(r.End)
		desc := fmt.Sprintf("step %d: %s", i+1, r.Step.Describe(o.Timing))
		if isLineStep(r.Step) {
			col := colKill
			if r.Step.Action != scenarios.ActKill {
				col = colRestart
			}
			b.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="6 4">`, x1, y-4, x1, bottom, col)
			b.title(desc)
			b.f("</line>\n")
			labels = append(labels, label{x1, fmt.Sprintf("%d %s", i+1, r.Step.Label()), col})
			continue
		}
		// A step that took (almost) no time still gets minStepWidth, after the previous one.
		x1 = math.Max(x1, prevEnd)
		x2 = math.Max(x2, x1+minStepWidth)
		prevEnd = x2
		fill := "#ececec"
		if i%2 == 1 {
			fill = "#d4d4d4"
		}
		if r.TimedOut {
			fill = "#f8d7a8"
		}
		b.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" stroke="#ffffff" stroke-width="1">`, x1, y+4, x2-x1, h-8, fill)
		b.title(desc)
		b.f("</rect>\n")
		text := fmt.Sprintf("%d %s", i+1, r.Step.Label())
		if x2-x1 < textWidth(text, 10)+8 {
			text = fmt.Sprint(i + 1)
		}
		if x2-x1 >= textWidth(text, 10)+4 {
			p.label(y+h/2+3.5, 10, `fill="#555555"`, text, right(x1+3))
		}
	}
	// Kill/start labels above the lanes, in the first row where they overlap no other label: after their
	// line, else before it.
	for _, lb := range labels {
	cands:
		for _, c := range []candidate{right(lb.x + 3), left(lb.x - 3)} {
			for row := range stepRows {
				if p.label(y-8-float64(row)*stepRowH, 11, `font-weight="bold" fill="`+lb.color+`"`, lb.text, c) {
					break cands
				}
			}
		}
	}
}

// zoomH is the height of the zoomed strip: its heading, three rows of step labels, the strip and its axis.
const zoomH = 122.0

// zoomSpan is the window of a zoomed takeover: what happens within it is too fast for the main time axis.
const zoomSpan = 100 * time.Millisecond

// zoomMin is the least window the zoomed strip shows.
const zoomMin = 20 * time.Millisecond

// zoomWindow returns the interval to show enlarged below the picture: around a kill whose component was
// started again, or whose stall ended, within zoomSpan (a takeover of the keeper modes), from just before the
// kill to just after the later of the two.
func zoomWindow(o *scenarios.Outcome) (win [2]time.Time, ok bool) {
	if o.Evidence == nil {
		return win, false
	}
	for i, r := range o.Steps {
		if r.Step.Action != scenarios.ActKill {
			continue
		}
		end := r.Start
		if i+1 < len(o.Steps) && isLineStep(o.Steps[i+1].Step) && o.Steps[i+1].Start.Sub(r.Start) < zoomSpan {
			end = o.Steps[i+1].Start
		}
		if _, to, ok := longestRead(o.Evidence, r.Start, end.Add(time.Millisecond)); ok && to.Sub(r.Start) < zoomSpan && to.After(end) {
			end = to
		}
		if end.Equal(r.Start) {
			continue
		}
		// At least zoomMin wide, so that the reads around the takeover show.
		pad := max(end.Sub(r.Start)/4+time.Millisecond, (zoomMin-end.Sub(r.Start))/2)
		return [2]time.Time{r.Start.Add(-pad), end.Add(pad)}, true
	}
	return win, false
}

// longestRead returns the longest open or read that ended after t (and, if until is set, began before it): in
// the zoomed strip, the read that waited longest across the takeover. The report's stall is stallRead.
func longestRead(ev *scenarios.Evidence, t time.Time, until ...time.Time) (from, to time.Time, ok bool) {
	var longest time.Duration
	for _, e := range ev.Events {
		if len(until) > 0 && !e.Time.Add(-e.Latency).Before(until[0]) {
			continue
		}
		if e.Source == scenarios.SrcWorkload && !e.Time.Before(t) && e.Latency > longest {
			longest, from, to, ok = e.Latency, e.Time.Add(-e.Latency), e.Time, true
		}
	}
	return from, to, ok
}

// stallRead returns the open or read behind the report's stall: Measures.Stall is computed once, by
// Evidence.Measure, and the picture only looks up the first open or read after the kill that took that long,
// to mark it.
func stallRead(o *scenarios.Outcome) (from, to time.Time, ok bool) {
	k, killed := o.Evidence.KillTime()
	if !killed || o.Measures.Stall <= 0 {
		return from, to, false
	}
	for _, e := range o.Evidence.Events {
		if e.Source == scenarios.SrcWorkload && !e.Time.Before(k) && e.Latency == o.Measures.Stall {
			return e.Time.Add(-e.Latency), e.Time, true
		}
	}
	return from, to, false
}

// drawZoom draws the window win enlarged: the step lines in it, the reads (good or failed) of every container,
// the stall as the report states it, and the longest read across the takeover when that is another read, with
// an axis in milliseconds from the kill.
func drawZoom(p *placer, l svgLayout, o *scenarios.Outcome, m Measured, win [2]time.Time, y float64) {
	b, ev := p.b, o.Evidence
	z := svgLayout{width: l.width, left: l.left, right: l.right, t0: win[0], span: win[1].Sub(win[0]).Seconds()}
	// The heading, then three rows of step labels (12 px apart) above the strip.
	top, bottom := y+52, y+zoomH-30
	heading := fmt.Sprintf("zoomed: %s around the kill", win[1].Sub(win[0]).Round(time.Millisecond))
	p.fixed(16, y+8, 12, "start", `font-weight="bold" fill="`+colText+`"`, heading)
	b.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#fafafa" stroke="#cccccc"/>`+"\n", z.left, top, z.width-z.left-z.right, bottom-top)
	var kill time.Time
	inWindow := func(r scenarios.StepRecord) bool {
		return isLineStep(r.Step) && !r.Start.Before(win[0]) && !r.Start.After(win[1])
	}
	for _, r := range o.Steps {
		if inWindow(r) {
			x := z.x(r.Start)
			p.marks = append(p.marks, box{x - 1.5, top - 4, x + 1.5, bottom})
		}
	}
	for i, r := range o.Steps {
		if !inWindow(r) {
			continue
		}
		if kill.IsZero() && r.Step.Action == scenarios.ActKill {
			kill = r.Start
		}
		col := colKill
		if r.Step.Action != scenarios.ActKill {
			col = colRestart
		}
		x := z.x(r.Start)
		b.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="6 4"/>`+"\n", x, top-4, x, bottom, col)
		for row := 0; row < 3; row++ {
			if p.label(top-8-float64(row)*12, 10, `font-weight="bold" fill="`+col+`"`, fmt.Sprintf("%d %s", i+1, r.Step.Label()), right(x+3), left(x-3)) {
				break
			}
		}
	}
	// The stall in the report's words and with its figure, beside the heading where no label can take its
	// place; its read is marked when it lies in the window.
	stall := stallWords + " " + m.stall()
	from, to, stalled := stallRead(o)
	marked := stalled && to.After(win[0]) && from.Before(win[1])
	switch {
	case marked:
		x1, x2 := z.x(from), z.x(to)
		b.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="10" fill="%s" opacity="0.8">`, x1, top+8, math.Max(x2-x1, 2), colFail)
		b.title(fmt.Sprintf("the stall: the longest open or read after the kill took %s", to.Sub(from)))
		b.f("</rect>\n")
		p.marks = append(p.marks, box{x1, top + 8, x1 + math.Max(x2-x1, 2), top + 18})
		stall += ": the orange bar"
	case stalled:
		stall += fmt.Sprintf(", at %s: outside this window", ev.Since(to))
	}
	p.fixed(16+textWidth(heading, 12)+16, y+8, 12, "start", `fill="#a35f0c"`, stall)
	// Else the read that waited longest across the takeover, named so that it is not taken for the stall.
	if from, to, ok := longestRead(ev, kill, win[1]); ok && !marked && !kill.IsZero() {
		x1, x2 := z.x(from), z.x(to)
		b.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="10" fill="%s" opacity="0.6">`, x1, top+8, math.Max(x2-x1, 2), colSubtle)
		b.title(fmt.Sprintf("the longest open or read in this window took %s", to.Sub(from)))
		b.f("</rect>\n")
		p.marks = append(p.marks, box{x1, top + 8, x1 + math.Max(x2-x1, 2), top + 18})
		lbl := fmt.Sprintf("longest read in this window %.1fms", float64(to.Sub(from).Microseconds())/1000)
		p.label(top+17, 10, `fill="`+colSubtle+`"`, lbl, right(x2+5), left(x1-5))
	}
	for _, e := range ev.Events {
		if e.Source != scenarios.SrcWorkload || e.Time.Before(win[0]) || e.Time.After(win[1]) {
			continue
		}
		x := z.x(e.Time)
		if e.IsGoodIO() {
			b.f(`<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", x, bottom-8, colGood)
		} else if e.IsWorkloadError() {
			b.f(`<rect x="%.1f" y="%.1f" width="3" height="10" fill="%s"/>`+"\n", x-1.5, bottom-13, colBad)
		}
	}
	// Axis: milliseconds from the kill.
	step := tickStep(z.span * 1000)
	for ms := math.Ceil((win[0].Sub(kill).Seconds()*1000)/step) * step; ms <= win[1].Sub(kill).Seconds()*1000+1e-9; ms += step {
		x := z.x(kill.Add(time.Duration(ms * float64(time.Millisecond))))
		b.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888888"/>`+"\n", x, bottom, x, bottom+5)
		p.fixed(x, bottom+17, 10, "middle", `fill="`+colSubtle+`"`, trimFloat(ms)+"ms")
	}
	p.fixed(l.left-22, bottom+17, 10, "end", `fill="`+colSubtle+`"`, "ms since the kill")
}

// textWidth estimates the width of s in pixels at font size px (DejaVu Sans averages ~0.6 em).
func textWidth(s string, px float64) float64 {
	return float64(len([]rune(s))) * px * 0.6
}

func drawLegend(p *placer, y float64) {
	b := p.b
	x := 16.0
	item := func(draw func(x float64), text string) {
		draw(x)
		p.fixed(x+15, y+4, 11, "start", `fill="`+colText+`"`, text)
		x += 15 + textWidth(text, 11) + 18
	}
	item(func(x float64) { b.f(`<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/>`, x+4, y, colGood) }, "good read")
	item(func(x float64) { b.f(`<rect x="%.1f" y="%.1f" width="3" height="14" fill="%s"/>`, x+3, y-7, colBad) }, "failed read or open")
	item(func(x float64) { b.f(`<path d="M%.1f %.1f l9 6 l-9 6 z" fill="%s"/>`, x, y-6, colStart) }, "container started (#instance)")
	item(func(x float64) { b.f(`<rect x="%.1f" y="%.1f" width="9" height="9" fill="%s"/>`, x, y-4.5, colExit) }, "container exited")
	item(func(x float64) { b.f(`<path d="M%.1f %.1f l6 6 l-6 6 l-6 -6 z" fill="%s"/>`, x+5, y-6, colFail) }, "start failed (kubelet)")
	item(func(x float64) { b.f(`<rect x="%.1f" y="%.1f" width="11" height="11" fill="%s"/>`, x, y-5.5, colRun) }, "instance running")
	x, y = 16, y+20
	item(func(x float64) { b.f(`<rect x="%.1f" y="%.1f" width="11" height="11" fill="%s"/>`, x, y-5.5, colUp) }, "component serving / stat ok")
	item(func(x float64) { b.f(`<rect x="%.1f" y="%.1f" width="11" height="11" fill="%s"/>`, x, y-5.5, colWarm) }, "component starting")
	item(func(x float64) { b.f(`<rect x="%.1f" y="%.1f" width="11" height="11" fill="%s"/>`, x, y-5.5, colDown) }, "component down / stat fails")
	item(func(x float64) {
		b.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="6 4"/>`, x, y, x+11, y, colKill)
	}, "component killed")
	item(func(x float64) {
		b.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="6 4"/>`, x, y, x+11, y, colRestart)
	}, "component started")
}

// failureClass names a start failure in a few words.
func failureClass(msg string) string {
	switch {
	case strings.Contains(msg, "failed to stat"):
		return "failed to stat volume dir"
	case strings.Contains(msg, "subPath"):
		return "failed to prepare subPath"
	case len([]rune(msg)) > 32:
		return string([]rune(msg)[:32]) + "…"
	}
	return msg
}

// tickStep picks a round tick interval giving at most ~12 ticks.
func tickStep(span float64) float64 {
	for _, s := range []float64{0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600} {
		if span/s <= 12 {
			return s
		}
	}
	return 1200
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.1f", v)
	return strings.TrimSuffix(s, ".0")
}
