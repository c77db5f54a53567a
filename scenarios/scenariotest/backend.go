// Package scenariotest has a scripted backend for the tests of the runner, the checks and the report: a
// successful "restart" run without root.
package scenariotest

import (
	"context"
	"fmt"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// reader is the container of the restart scenario whose evidence Backend scripts.
const reader = "reader"

// Backend scripts the evidence of a successful "restart" run: the runner, the checks and the report can
// be tested without root. The privileged tests in scenarios/local run the real thing.
type Backend struct {
	rec *scenarios.Recorder
	// StartErr and StopErr are what Setup and Stop return.
	StartErr, StopErr error
	// Calls lists the backend's calls in order: start, kill, start-plugin, stop.
	Calls []string
	// RestartRecovers: whether the container reads again after the plugin is back.
	RestartRecovers bool
	// BackendName is the backend's name ("fake" when empty).
	BackendName string
}

func (f *Backend) Name() string {
	if f.BackendName == "" {
		return "fake"
	}
	return f.BackendName
}

func (f *Backend) Describe() string { return "backend fake" }

func (f *Backend) KeepNote() string { return "" }

func (f *Backend) Timing() scenarios.Timing {
	return scenarios.Timing{ReadInterval: 10 * time.Millisecond, BackoffBase: 20 * time.Millisecond, BackoffMax: 600 * time.Millisecond}
}

func (f *Backend) add(e scenarios.Event) { f.rec.Add(e) }

func (f *Backend) Setup(_ context.Context, _ *scenarios.Scenario, env *scenarios.Env) error {
	f.Calls = append(f.Calls, "start")
	if f.StartErr != nil {
		return f.StartErr
	}
	f.rec = env.Rec
	f.rec.SetPaths(map[string]string{scenarios.PathVolume: "/k/v", scenarios.PathRoot: "/k"})
	f.rec.SetKubelet(scenarios.MustKubeletVersion("v1.37.2"))
	if _, err := env.Log("fake.log"); err != nil {
		return err
	}
	f.add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.PluginContainer, Kind: scenarios.KReady})
	f.add(scenarios.Event{Source: scenarios.SrcProbe, Kind: scenarios.KProbe, Path: scenarios.PathVolume})
	f.add(scenarios.Event{Source: scenarios.SrcKubelet, Kind: scenarios.KContainerStarted, Container: reader})
	for range 3 {
		f.add(scenarios.Event{Source: scenarios.SrcWorkload, Kind: scenarios.KRead, Container: reader, Content: scenarios.Content})
	}
	return nil
}

func (f *Backend) Kill(_ context.Context, c topology.Component) error {
	if c != topology.PluginContainer {
		return fmt.Errorf("no component %s", c)
	}
	f.Calls = append(f.Calls, "kill")
	f.add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.PluginContainer, Kind: scenarios.KKilled})
	f.add(scenarios.Event{Source: scenarios.SrcWorkload, Kind: scenarios.KReadError, Container: reader, Errno: "ENOTCONN"})
	f.add(scenarios.Event{Source: scenarios.SrcKubelet, Kind: scenarios.KContainerExited, Container: reader, ExitCode: scenarios.IntPtr(1)})
	f.add(scenarios.Event{Source: scenarios.SrcProbe, Kind: scenarios.KProbe, Path: scenarios.PathVolume, Errno: "ENOTCONN"})
	f.add(scenarios.Event{Source: scenarios.SrcKubelet, Kind: scenarios.KStartFailed, Container: reader, Instance: 1, Errno: "ENOTCONN",
		Message: `Error: failed to generate container "x" spec: failed to generate spec: failed to stat "/k/v": stat /k/v: transport endpoint is not connected`})
	return nil
}

func (f *Backend) Upgrade(_ context.Context, c topology.Component) error {
	return fmt.Errorf("no upgrade of %s", c)
}

func (f *Backend) Start(_ context.Context, c topology.Component) error {
	if c != topology.PluginContainer {
		return fmt.Errorf("no component %s", c)
	}
	f.Calls = append(f.Calls, "start-plugin")
	f.add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.PluginContainer, Kind: scenarios.KReady})
	f.add(scenarios.Event{Source: scenarios.SrcProbe, Kind: scenarios.KProbe, Path: scenarios.PathVolume})
	if f.RestartRecovers {
		f.add(scenarios.Event{Source: scenarios.SrcKubelet, Kind: scenarios.KContainerStarted, Container: reader, Instance: 1})
		f.add(scenarios.Event{Source: scenarios.SrcWorkload, Kind: scenarios.KRead, Container: reader, Instance: 1, Content: scenarios.Content})
	}
	return nil
}

func (f *Backend) Stop(context.Context) error {
	f.Calls = append(f.Calls, "stop")
	return f.StopErr
}
