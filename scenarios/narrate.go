package scenarios

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
)

// PathRoot is the Evidence.Paths label of the run's kubelet root dir; the live timeline and the report show
// it as $ROOT to keep lines short.
const PathRoot = "root"

// Narrator prints the notable events of the evidence as they appear: steps, plugin lifecycle, container
// starts, exits and start failures, changes of the volume dir's stat, and each container's switches between
// good reads and errors (not every read).
type Narrator struct {
	out   io.Writer
	start time.Time
	seen  map[eventKey]bool
	// state is each container instance's last read outcome: "ok" or an errno / error kind.
	state map[string]string
	probe map[string]string
	// said: a long message (by its text with container IDs blanked) → when it was first printed, so that a
	// repeat says "the same as at t+…" instead of printing it again.
	said map[string]time.Time
	// rootSaid: $ROOT was defined; cacheSaid: containers whose reads after the kill were explained.
	rootSaid  bool
	cacheSaid map[string]bool
}

type eventKey struct {
	t                 int64
	src               Source
	kind              Kind
	container, path   string
	instance          int
	message, errnoStr string
}

// NewNarrator returns a Narrator printing to out, with times relative to start.
func NewNarrator(out io.Writer, start time.Time) *Narrator {
	return &Narrator{out: out, start: start, seen: map[eventKey]bool{}, state: map[string]string{}, probe: map[string]string{},
		said: map[string]time.Time{}, cacheSaid: map[string]bool{}}
}

// Update prints the events of ev not printed before.
func (n *Narrator) Update(ev *Evidence) {
	kill, killed := ev.KillTime()
	for _, e := range ev.Events {
		k := eventKey{e.Time.UnixNano(), e.Source, e.Kind, e.Container, e.Path, e.Instance, e.Message, e.Errno}
		if n.seen[k] {
			continue
		}
		n.seen[k] = true
		text := n.describe(e)
		if text == "" {
			continue
		}
		if e.IsWorkloadError() && killed && !e.Time.Before(kill) {
			text += n.cachedReads(ev, e, kill)
		}
		text = n.once(e, Shorten(ev, text))
		rel := ""
		if killed && !e.Time.Before(kill) {
			rel = fmt.Sprintf("kill+%.2fs", e.Time.Sub(kill).Seconds())
		}
		if root := ev.Paths[PathRoot]; !n.rootSaid && root != "" && strings.Contains(text, "$ROOT") {
			n.rootSaid = true
			fmt.Fprintf(n.out, "  ($ROOT below is %s, the run's kubelet root dir)\n", root)
		}
		fmt.Fprintf(n.out, "  t+%6.2fs %-11s %-10s %s\n", e.Time.Sub(n.start).Seconds(), rel, Actor(e), text)
	}
}

// longMessage is the length above which a message printed before is referred to instead of repeated.
const longMessage = 100

// containerID matches the IDs and UIDs that differ between otherwise equal messages of kubelet and the runtime.
var containerID = regexp.MustCompile(`[0-9a-f]{4,}…|[0-9a-f]{12,}|[0-9a-f]{8}-[0-9a-f-]{27}`)

// once returns text, or, for a long message of a start failure or pod event printed before, a reference to
// the first time: kubelet repeats its error at every attempt.
func (n *Narrator) once(e Event, text string) string {
	if len(text) <= longMessage || (e.Kind != KStartFailed && e.Kind != KPodEvent) {
		return text
	}
	key := string(e.Kind) + " " + e.Container + " " + containerID.ReplaceAllString(text, "…")
	if first, ok := n.said[key]; ok {
		what, _, _ := strings.Cut(text, ":")
		return fmt.Sprintf("%s again: the same error as at t+%.2fs", what, first.Sub(n.start).Seconds())
	}
	n.said[key] = e.Time
	return text
}

// cachedReads explains, at a container's first error after the kill, why its reads in between succeeded.
func (n *Narrator) cachedReads(ev *Evidence, e Event, kill time.Time) string {
	if n.cacheSaid[e.Container] {
		return ""
	}
	n.cacheSaid[e.Container] = true
	good := ev.Count(kill, func(r Event) bool { return r.Container == e.Container && r.IsGoodRead() && r.Time.Before(e.Time) })
	if good == 0 {
		return ""
	}
	return fmt.Sprintf(" (the %d read(s) since the kill still succeeded: the dying server still answered, or the kernel "+
		"served them from its page cache until the file's cached attributes expired (the server's attribute timeout: 1 s for dummy-fuse, the metadata TTL for gcsfuse) "+
		"and it had to ask the dead server)", good)
}

// Actor names who an event is about in a timeline line: e.Who(), or nothing for the runner's own lines.
func Actor(e Event) string {
	if e.Source == SrcRunner {
		return ""
	}
	return e.Who()
}

// describe returns the line for e, or "" when e is not notable.
func (n *Narrator) describe(e Event) string {
	switch e.Source {
	case SrcRunner:
		return "── " + e.Message
	case SrcComponent, SrcKubelet, SrcRemediator, SrcStorage:
		return EventText(e)
	case SrcProbe:
		state := "ok"
		if e.Errno != "" {
			state = e.Errno
		}
		prev, seen := n.probe[e.Path]
		if prev == state {
			return ""
		}
		n.probe[e.Path] = state
		if seen && state == "ok" {
			return EventText(e) + " again (mounts restored)"
		}
		return EventText(e)
	case SrcWorkload:
		id := e.Container // per container, not instance: a restarted container that reads is "again"
		switch {
		case e.IsGoodRead():
			if n.state[id] == "ok" {
				return ""
			}
			first := n.state[id] == ""
			n.state[id] = "ok"
			if first {
				return fmt.Sprintf("first good read: %q", e.Content)
			}
			return fmt.Sprintf("good read again: %q", e.Content)
		case e.IsAckedWrite():
			if n.state[id] == "ok" {
				return ""
			}
			first := n.state[id] == ""
			n.state[id] = "ok"
			if first {
				return "first acknowledged write: " + EventText(e)
			}
			return "writes acknowledged again: " + EventText(e)
		case e.IsWorkloadError():
			s := string(e.Kind) + " " + e.Errno
			if n.state[id] == s {
				return ""
			}
			n.state[id] = s
			return fmt.Sprintf("%s %s: %s", e.Kind, e.Errno, e.Message)
		case e.Kind == KRead:
			return fmt.Sprintf("read unexpected content %q", e.Content)
		case e.Kind == KWorkloadExit, e.Kind == KLog:
			return EventText(e)
		}
	}
	return ""
}

// EventText is a one-line description of any event.
func EventText(e Event) string {
	code := ""
	if e.ExitCode != nil {
		code = fmt.Sprintf(" with code %d", *e.ExitCode)
	}
	switch e.Kind {
	case KStarted:
		return e.Component.Noun() + " started" + suffix(e.Message)
	case KReady:
		if r := e.Component.Ready(); r != "" {
			return r + suffix(e.Message)
		}
		return string(e.Component) + " serves again" + suffix(e.Message)
	case KKilled:
		return e.Component.Noun() + " killed" + suffix(e.Message)
	case KExited:
		return e.Component.Noun() + " exited" + suffix(e.Message)
	case KContainerStarted:
		return "container started" + suffix(e.Message)
	case KContainerExited:
		return "container exited" + code + suffix(e.Message)
	case KStartFailed:
		return "start failed: " + e.Message
	case KBackOff, KVolumeMounted:
		return e.Message
	case KPodEvent:
		return "pod event: " + e.Message
	case KVolumeHealth:
		if e.Message == "" {
			return "pod.status.volumeHealth: no condition"
		}
		return "pod.status.volumeHealth: " + e.Message
	case KProbe:
		if e.Errno == "" {
			return fmt.Sprintf("host %s dir: stat ok", e.Path)
		}
		return fmt.Sprintf("host %s dir: stat fails with %s", e.Path, e.Errno)
	case KWorkloadExit:
		return "workload exits" + code + suffix(e.Message)
	case KRead:
		return fmt.Sprintf("read %q", e.Content)
	case KReadError, KOpenError:
		return fmt.Sprintf("%s %s: %s", e.Kind, e.Errno, e.Message)
	case KWriteError:
		return fmt.Sprintf("%s (%s) %s: %s", e.Kind, e.Op, e.Errno, e.Message)
	case KWrite:
		return fmt.Sprintf("wrote piece %s: %s bytes at %s", orUnknown(e.Seq), orUnknown(e.Bytes), orUnknown(e.Offset))
	case KStored:
		return e.Message
	case KStep, KStepTimeout, KLog:
		return e.Message
	}
	s := string(e.Kind)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// orUnknown formats a writer's number, "?" when the log lacked it.
func orUnknown[T int | int64](p *T) string {
	if p == nil {
		return "?"
	}
	return fmt.Sprint(*p)
}

func suffix(m string) string {
	if m == "" {
		return ""
	}
	return " (" + m + ")"
}

// Shorten replaces the run's root dir with $ROOT in s.
func Shorten(ev *Evidence, s string) string {
	if root := ev.Paths[PathRoot]; root != "" {
		s = strings.ReplaceAll(s, root, "$ROOT")
	}
	return s
}
