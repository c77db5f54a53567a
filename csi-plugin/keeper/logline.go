package keeper

import (
	"regexp"
	"strconv"
)

// The keeper's log lines that scenario backends turn into evidence (scenarios/local, scenarios/kube): their
// formats, and LogLine, which parses them; the tests check that one reads the other.
const (
	fmtConnected = "connected to the plugin; handed it %d connection(s) held here"
	fmtServed    = "volume %s: " + Served + " %s pid %d"
	fmtExited    = "FUSE server pid %d exited (%v); its connections stay mounted, held here: %s"
)

var (
	logConnected = regexp.MustCompile(`connected to the plugin`)
	logServed    = regexp.MustCompile(`volume (\S+): ` + Served + ` (\S+) pid (\d+)`)
	logExited    = regexp.MustCompile(`FUSE server pid (\d+) exited \(([^)]*)\)`)
)

// LogKind is the kind of a keeper log line LogLine recognises.
type LogKind int

// The kinds of LogLine's answer.
const (
	LogOther        LogKind = iota // a line of no interest
	LogConnected                   // the keeper is connected to the plugin (it serves what the plugin hands it)
	LogServed                      // a FUSE server serves Volume: Version, PID
	LogServerExited                // the FUSE server PID exited: Reason
)

// LogEvent is what one line of the keeper's log says.
type LogEvent struct {
	Kind    LogKind
	Volume  string
	Version string
	PID     int // in the keeper's PID namespace
	Reason  string
}

// LogLine parses one line of the keeper's log (with or without klog's header).
func LogLine(line []byte) LogEvent {
	if m := logServed.FindSubmatch(line); m != nil {
		pid, _ := strconv.Atoi(string(m[3]))
		return LogEvent{Kind: LogServed, Volume: string(m[1]), Version: string(m[2]), PID: pid}
	}
	if m := logExited.FindSubmatch(line); m != nil {
		pid, _ := strconv.Atoi(string(m[1]))
		return LogEvent{Kind: LogServerExited, PID: pid, Reason: string(m[2])}
	}
	if logConnected.Match(line) {
		return LogEvent{Kind: LogConnected}
	}
	return LogEvent{}
}
