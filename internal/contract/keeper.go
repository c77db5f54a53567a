package contract

import (
	"regexp"
	"strconv"
)

// KeeperServed is what the keeper's line says once a FUSE server serves a volume ("volume <id>: served by
// dummy-fuse <version> pid <pid>"); the sidecar that keeps its descriptor runs the keeper's code and says it too.
const KeeperServed = "served by dummy-fuse"

// The keeper's lines that ParseKeeperLine reads, as formats of its log calls.
const (
	KeeperConnectedFormat = "connected to the plugin; handed it %d connection(s) held here"               // the number of connections
	KeeperServedFormat    = "volume %s: " + KeeperServed + " %s pid %d"                                   // volume, server version, PID
	KeeperExitedFormat    = "FUSE server pid %d exited (%v); its connections stay mounted, held here: %s" // PID, error, volumes
	// relay-keeper mode: the real server the keeper runs on a volume's backend.
	KeeperRealServerFormat       = "volume %s: real server pid %d serves its backend (%s)" // volume, PID, command
	KeeperRealServerExitedFormat = "volume %s: real server pid %d exited (%v)"             // volume, PID, error
)

// KeeperCrashSuccessorFormat is what `csi-plugin keeper crash --successor` prints: the first server's PID, the
// volume, the successor's PID (both in the keeper's PID namespace); ParseCrashSuccessor reads it.
const KeeperCrashSuccessorFormat = "SIGKILL sent to FUSE server pid %d of volume %s, then to its successor pid %d"

var keeperCrashSuccessor = regexp.MustCompile(`SIGKILL sent to FUSE server pid (\d+) of volume \S+, then to its successor pid (\d+)`)

// ParseCrashSuccessor reads the two PIDs `keeper crash --successor` killed from its output.
func ParseCrashSuccessor(out string) (first, next int, ok bool) {
	m := keeperCrashSuccessor.FindStringSubmatch(out)
	if m == nil {
		return 0, 0, false
	}
	first, _ = strconv.Atoi(m[1])
	next, _ = strconv.Atoi(m[2])
	return first, next, true
}

var (
	keeperConnected = regexp.MustCompile(`connected to the plugin`)
	keeperServed    = regexp.MustCompile(`volume (\S+): ` + KeeperServed + ` (\S+) pid (\d+)`)
	keeperExited    = regexp.MustCompile(`FUSE server pid (\d+) exited \(([^)]*)\)`)
	keeperReal      = regexp.MustCompile(`volume (\S+): real server pid (\d+) (serves its backend|exited) \((.*)\)`)
)

// KeeperLineKind is the kind of a keeper log line ParseKeeperLine recognises.
type KeeperLineKind int

// The kinds of ParseKeeperLine's answer.
const (
	KeeperLineOther            KeeperLineKind = iota // a line of no interest
	KeeperLineConnected                              // the keeper is connected to the plugin (it serves what the plugin hands it)
	KeeperLineServed                                 // a FUSE server serves Volume: Version, PID
	KeeperLineServerExited                           // the FUSE server PID exited: Reason
	KeeperLineRealServer                             // relay-keeper: the real server PID serves Volume's backend (Reason: its command)
	KeeperLineRealServerExited                       // relay-keeper: Volume's real server PID exited: Reason
)

// KeeperLine is what one line of the keeper's log says.
type KeeperLine struct {
	Kind    KeeperLineKind
	Volume  string
	Version string
	PID     int // in the keeper's PID namespace
	Reason  string
}

// ParseKeeperLine parses one line of the keeper's log (with or without klog's header).
func ParseKeeperLine(line []byte) KeeperLine {
	if m := keeperReal.FindSubmatch(line); m != nil {
		pid, _ := strconv.Atoi(string(m[2]))
		kind := KeeperLineRealServer
		if string(m[3]) == "exited" {
			kind = KeeperLineRealServerExited
		}
		return KeeperLine{Kind: kind, Volume: string(m[1]), PID: pid, Reason: string(m[4])}
	}
	if m := keeperServed.FindSubmatch(line); m != nil {
		pid, _ := strconv.Atoi(string(m[3]))
		return KeeperLine{Kind: KeeperLineServed, Volume: string(m[1]), Version: string(m[2]), PID: pid}
	}
	if m := keeperExited.FindSubmatch(line); m != nil {
		pid, _ := strconv.Atoi(string(m[1]))
		return KeeperLine{Kind: KeeperLineServerExited, PID: pid, Reason: string(m[2])}
	}
	if keeperConnected.Match(line) {
		return KeeperLine{Kind: KeeperLineConnected}
	}
	return KeeperLine{}
}
