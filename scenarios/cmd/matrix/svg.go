package main

import (
	"bytes"
	"fmt"
	"html"
	"strings"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/report"
)

// Heatmap geometry, in pixels.
const (
	hmLabelW = 440 // the row labels
	hmCellW  = 82
	hmCellH  = 16
	hmHeadH  = 40 // I/O kind, then kubelet
	hmPad    = 8
)

// hmFill is the colour of each class of outcome.
var hmFill = map[class]string{classNone: "#eeeeee", classOK: "#9ed99e", classRecovered: "#f5d36b", classLost: "#e8807a", classNotRunnable: "#b8c4d6"}

// heatmap renders docs/outage-matrix.svg: a row per matrix row, a column per I/O kind × kubelet; each cell
// coloured by its outcome with the first error and the time to ok in it, the full text in its tooltip.
func (m *matrix) heatmap() []byte {
	ncol := len(report.IOKinds) * len(m.columns)
	w := hmPad*2 + hmLabelW + ncol*hmCellW
	h := hmPad*2 + hmHeadH + len(m.rows)*hmCellH + 40
	var b bytes.Buffer
	f := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="10">`+"\n", w, h)
	f(`<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	x0, y0 := hmPad+hmLabelW, hmPad+hmHeadH
	f(`<text x="%d" y="%d" font-weight="bold">killed · placement · server · scenario</text>`+"\n", hmPad, y0-6)
	for ki, k := range report.IOKinds {
		gx := x0 + ki*len(m.columns)*hmCellW
		f(`<text x="%d" y="%d" text-anchor="middle" font-weight="bold">%s</text>`+"\n", gx+len(m.columns)*hmCellW/2, hmPad+12, ioTitles[k])
		f(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", gx, hmPad, gx, y0+len(m.rows)*hmCellH)
		for ci, col := range m.columns {
			f(`<text x="%d" y="%d" text-anchor="middle" font-size="9">%s</text>`+"\n", gx+ci*hmCellW+hmCellW/2, y0-6, html.EscapeString(col.label()))
		}
	}
	for ri, r := range m.rows {
		y := y0 + ri*hmCellH
		if ri > 0 && r.Killed != m.rows[ri-1].Killed {
			f(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`+"\n", hmPad, y, w-hmPad, y)
		}
		f(`<text x="%d" y="%d">%s</text>`+"\n", hmPad, y+hmCellH-4, html.EscapeString(r.label()))
		for ki, k := range report.IOKinds {
			for ci, col := range m.columns {
				x := x0 + (ki*len(m.columns)+ci)*hmCellW
				c, recorded := m.cells[r][col]
				o, ok := c.outcome(k)
				if !recorded || (!ok && c.legacy) { // an older record holds only its first container and stat
					f(`<rect x="%d" y="%d" width="%d" height="%d" fill="white" stroke="#ddd"><title>not recorded</title></rect>`+"\n", x, y, hmCellW, hmCellH)
					continue
				}
				cl, short, long := classNone, "–", "no I/O of this kind"
				switch {
				case c.notRunnable:
					cl, short, long = classNotRunnable, "n/r", notRunnableText+": the kubelet lacks what the row needs (its report says what)"
				case ok:
					cl, short, long = classOf(o), shortText(o), text(o)
				}
				if c.legacy && ok {
					short += "¹"
					long += " (older record: first container only)"
				}
				f(`<rect x="%d" y="%d" width="%d" height="%d" fill="%s" stroke="white"><title>%s</title></rect>`+"\n",
					x, y, hmCellW, hmCellH, hmFill[cl], html.EscapeString(r.label()+" · "+ioTitles[k]+" · "+col.label()+": "+long))
				f(`<text x="%d" y="%d" text-anchor="middle" font-size="9">%s</text>`+"\n", x+hmCellW/2, y+hmCellH-4, html.EscapeString(short))
			}
		}
	}
	ly := y0 + len(m.rows)*hmCellH + 22
	lx := hmPad
	for _, it := range []struct {
		cl   class
		name string
	}{{classOK, "no error"}, {classRecovered, "error, then ok again (→ seconds after the kill)"}, {classLost, "error, never ok again"}, {classNone, "no I/O of this kind"}, {classNotRunnable, "n/r: not runnable there"}} {
		f(`<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", lx, ly-10, hmFill[it.cl], lx+16, ly, html.EscapeString(it.name))
		lx += 24 + 6*len(it.name)
	}
	f(`<text x="%d" y="%d">white: not recorded · ¹ older record</text>`+"\n", lx, ly)
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// shortText fits a cell: "ok", "ENOTCONN→1.1", "ENOTCONN".
func shortText(o report.IOOutcome) string {
	switch classOf(o) {
	case classOK:
		if o.Stall == 0 {
			return "ok"
		}
		return "ok " + ms(o.Stall)
	case classRecovered:
		return fmt.Sprintf("%s→%.1fs", abbrev(o.FirstError), o.FaultToGood)
	}
	return abbrev(o.FirstError)
}

func abbrev(e string) string {
	e = strings.TrimPrefix(e, "E")
	if len(e) > 9 {
		return e[:9]
	}
	return e
}
