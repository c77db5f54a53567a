package local

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// pluginPart is the plugin container: csi-plugin in a PID namespace of its own, so that its FUSE servers die
// with it (see the package doc). Its process and CSI client are the Backend's, which the pod's volume calls use.
type pluginPart struct {
	noPart
	b *Backend
}

func newPluginPart(b *Backend, _ *scenarios.Env) (part, error) { return &pluginPart{b: b}, nil }

func (p *pluginPart) kill(ctx context.Context) error { return p.b.killPlugin(ctx) }

func (p *pluginPart) start(ctx context.Context) error {
	if p.b.plugin != nil && !p.b.plugin.exited() {
		return errors.New("the plugin is still running")
	}
	return p.b.startPlugin(ctx)
}

// teardown closes the CSI client and stops the plugin, once the pod's volume is unpublished.
func (p *pluginPart) teardown() error {
	b := p.b
	if b.csi != nil {
		b.csi.Close()
	}
	if b.plugin != nil && !b.plugin.exited() {
		b.logf("teardown: stop plugin pid %d", b.plugin.pid())
		if err := b.plugin.stop(5 * time.Second); err != nil {
			return fmt.Errorf("stop plugin: %w", err)
		}
	}
	return nil
}

func (p *pluginPart) procs() []knownProc {
	if p.b.plugin == nil {
		return nil
	}
	return []knownProc{{p.b.plugin, fmt.Sprintf("plugin container: pid %d (csi-plugin, init of its PID namespace), socket %s", p.b.plugin.pid(), p.b.sock)}}
}

// pluginEvent records an event of the plugin container's lifecycle.
func (b *Backend) pluginEvent(kind scenarios.Kind, t time.Time, msg string) {
	b.rec.Add(scenarios.Event{Time: t, Source: scenarios.SrcComponent, Component: topology.PluginContainer, Kind: kind, Message: msg})
}

// killPlugin sends SIGKILL to the plugin's PID namespace init.
func (b *Backend) killPlugin(ctx context.Context) error {
	return b.killContainer(ctx, b.plugin, "plugin container", b.pluginEvent)
}

// startPlugin starts the plugin container and waits until it serves CSI (Probe: ready).
func (b *Backend) startPlugin(ctx context.Context) error {
	p, err := b.launchPlugin()
	if err != nil {
		return err
	}
	return b.waitPluginReady(ctx, p)
}

// launchPlugin starts the plugin container.
func (b *Backend) launchPlugin() (*proc, error) {
	args := []string{
		"--endpoint=unix://" + b.sock,
		"--nodeid=" + nodeID,
		"--drivername=" + b.opts.DriverName,
		"--state-dir=" + b.stateDir,
		"--ephemeral-dir=" + filepath.Join(b.pluginDir(), "ephemeral"),
		"--dummy-fuse-path=" + b.opts.FusePath,
		fmt.Sprintf("-v=%d", b.opts.PluginVerbosity),
	}
	args = append(args, b.sc.Plugin.Args()...)
	for _, p := range b.parts.All() {
		args = append(args, p.pluginArgs()...)
	}
	b.pluginStarts++
	b.logs.plugin.Printf("==== plugin container start #%d at %s: %s %s", b.pluginStarts,
		time.Now().UTC().Format(time.RFC3339Nano), b.opts.PluginPath, strings.Join(args, " "))
	cmd := exec.Command(b.opts.PluginPath, args...)
	cmd.Stdout, cmd.Stderr = b.logs.plugin.File(), b.logs.plugin.File()
	// A new PID namespace makes the plugin its init: when it dies, the kernel kills everything in it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Setpgid: true, Pdeathsig: b.deathSig()}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start plugin: %w", err)
	}
	p := startedProc(cmd)
	b.plugin = p
	flags := strings.Join(b.sc.Plugin.Args(), " ")
	if flags == "" {
		flags = "no restore flags"
	}
	b.pluginEvent(scenarios.KStarted, time.Time{}, fmt.Sprintf("pid %d, %s", p.pid(), flags))
	b.logf("plugin container start #%d: pid %d", b.pluginStarts, p.pid())
	go func() {
		<-p.done
		b.pluginEvent(scenarios.KExited, p.exitTime, p.state.String())
	}()
	return p, nil
}

// waitPluginReady connects to the plugin p's CSI socket and waits until it serves (Probe: ready).
func (b *Backend) waitPluginReady(ctx context.Context, p *proc) error {
	c, err := dialCSI(b.sock)
	if err != nil {
		return err
	}
	b.mu.Lock()
	old := b.csi
	b.csi = c
	b.mu.Unlock()
	if old != nil {
		old.Close()
	}
	what := fmt.Sprintf("the plugin to serve (Probe: ready; see %s)", b.logs.plugin.Name())
	return scenarios.Await(ctx, 30*time.Second, 20*time.Millisecond, what, func() (bool, error) {
		ok, err := b.csi.ready(ctx)
		if ok {
			b.pluginEvent(scenarios.KReady, time.Time{}, "Probe: ready")
			return true, nil
		}
		if p.exited() {
			return true, fmt.Errorf("plugin exited before serving (%s); see %s", p.state, b.logs.plugin.Name())
		}
		if err == nil {
			err = errors.New("not ready")
		}
		return false, fmt.Errorf("last Probe: %w", err)
	})
}
