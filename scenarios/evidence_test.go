package scenarios

import (
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

func TestParseWorkloadLine(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		line  string
		want  Event
		check func(t *testing.T, e Event)
	}{
		{
			line: `{"time":"2026-11-22T04:05:37.934096811Z","event":"read","file":"/mnt/dummy-file.txt","bytes":13,"content":"Hello world!\n","latency_us":46}`,
			want: Event{Kind: KRead, Content: Content, Path: "/mnt/dummy-file.txt"},
			check: func(t *testing.T, e Event) {
				if !e.IsGoodRead() || e.IsWorkloadError() {
					t.Errorf("a read of the content is a good read, not an error: %+v", e)
				}
			},
		},
		{
			line: `{"time":"2026-11-22T04:05:39.014479805Z","event":"read_error","file":"/mnt/dummy-file.txt","errno":"ENOTCONN","error":"read /mnt/dummy-file.txt: transport endpoint is not connected","latency_us":12}`,
			want: Event{Kind: KReadError, Errno: "ENOTCONN", Path: "/mnt/dummy-file.txt", Message: "read /mnt/dummy-file.txt: transport endpoint is not connected"},
			check: func(t *testing.T, e Event) {
				if !e.IsWorkloadError() || e.IsGoodRead() {
					t.Errorf("read_error must be a workload error: %+v", e)
				}
			},
		},
		{
			line: `{"time":"2026-11-22T04:05:39.014479805Z","event":"open_error","file":"/nonexist","errno":"ENOENT","error":"open /nonexist: no such file or directory"}`,
			want: Event{Kind: KOpenError, Errno: "ENOENT", Path: "/nonexist", Message: "open /nonexist: no such file or directory"},
		},
		{
			line: `{"time":"2026-11-22T04:05:39.014595256Z","event":"exit","file":"/nonexist","code":1,"reason":"open error: boom"}`,
			want: Event{Kind: KWorkloadExit, Path: "/nonexist", Message: "open error: boom"},
			check: func(t *testing.T, e Event) {
				if e.ExitCode == nil || *e.ExitCode != 1 {
					t.Errorf("exit code = %v, want 1", e.ExitCode)
				}
			},
		},
		{
			line: `{"time":"2026-11-22T04:05:37.93355083Z","event":"start","file":"/f","keep_open":false,"exit_on_error":true,"interval":"300ms"}`,
			want: Event{Kind: KWorkloadStart, Path: "/f", Message: "keep_open=false exit_on_error=true interval=300ms"},
		},
		{
			line: `{"time":"2026-11-22T04:05:37.9Z","event":"read","file":"/f","bytes":3,"content":"abc"}`,
			want: Event{Kind: KRead, Path: "/f", Content: "abc"},
			check: func(t *testing.T, e Event) {
				if e.IsGoodRead() {
					t.Errorf("a read of other content is not a good read")
				}
			},
		},
		{
			line: `flag provided but not defined: -bogus`,
			want: Event{Kind: KLog, Message: "flag provided but not defined: -bogus"},
			check: func(t *testing.T, e Event) {
				if !e.Time.Equal(now) {
					t.Errorf("a non-JSON line is stamped with the time it arrived: %v", e.Time)
				}
			},
		},
		{line: `{"event":"read"}`, want: Event{Kind: KLog, Message: `{"event":"read"}`}},
	}
	for _, tc := range cases {
		e := ParseWorkloadLine([]byte(tc.line), "reader", 2, now)
		if e.Source != SrcWorkload || e.Container != "reader" || e.Instance != 2 {
			t.Errorf("%s: source/container/instance = %s/%s/%d", tc.line, e.Source, e.Container, e.Instance)
		}
		if e.Kind != tc.want.Kind || e.Errno != tc.want.Errno || e.Path != tc.want.Path ||
			e.Message != tc.want.Message || e.Content != tc.want.Content {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.line, e, tc.want)
		}
		if tc.check != nil {
			tc.check(t, e)
		}
	}
}

func TestMeasure(t *testing.T) {
	s := newStory()
	s.at(0, Event{Source: SrcWorkload, Kind: KRead, Container: "reader", Content: Content})
	s.at(1000, Event{Source: SrcComponent, Component: topology.PluginContainer, Kind: KKilled})
	s.at(1200, Event{Source: SrcWorkload, Kind: KRead, Container: "reader", Content: Content}) // from the page cache
	s.at(1500, Event{Source: SrcProbe, Kind: KProbe, Path: PathVolume, Errno: "ENOTCONN"})
	s.at(1600, Event{Source: SrcWorkload, Kind: KReadError, Container: "reader", Errno: "ENOTCONN"})
	s.at(2500, Event{Source: SrcProbe, Kind: KProbe, Path: PathVolume})
	s.at(3000, Event{Source: SrcWorkload, Kind: KRead, Container: "reader", Content: Content, Instance: 1})
	m := s.ev.Measure("reader")
	if m.KillToError != 600*time.Millisecond || m.KillToRestore != 1500*time.Millisecond || m.KillToRecovery != 2*time.Second {
		t.Errorf("measures = %+v; want 600ms to ENOTCONN, 1.5s to restore, 2s to recovery (the cached read after the kill is no recovery)", m)
	}
	if got := (&Evidence{}).Measure("reader"); got != (Measures{}) {
		t.Errorf("no kill, no measures: %+v", got)
	}
}

// story builds evidence with events at offsets (ms) from a fixed start.
type story struct {
	ev *Evidence
}

// The containers of the stories.
const (
	reader = "reader"
	reopen = "reopen"
	holder = "holder"
)

func newStory() *story {
	start := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	return &story{ev: &Evidence{Start: start, Until: start, Paths: map[string]string{
		PathVolume: "/k/pods/u/volumes/kubernetes.io~csi/pv/mount", PathRoot: "/k",
	}}}
}

func (s *story) at(ms int, e Event) *story {
	e.Time = s.ev.Start.Add(time.Duration(ms) * time.Millisecond)
	s.ev.Events = append(s.ev.Events, e)
	if e.Time.After(s.ev.Until) {
		s.ev.Until = e.Time
	}
	s.ev.Sort()
	return s
}

func (s *story) until(ms int) *story {
	s.ev.Until = s.ev.Start.Add(time.Duration(ms) * time.Millisecond)
	return s
}
