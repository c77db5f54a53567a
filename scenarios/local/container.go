package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/podcgroup"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// container is one workload container of the pod with kubelet's handling: start attempts, restart policy,
// back-off.
type container struct {
	b     *Backend
	spec  scenarios.Container
	index int
	bo    restartBackoff

	firstAttempt chan struct{}
	instances
	// reset is set by restartAll: the container was removed, and starts again at once, without back-off.
	reset atomic.Bool
	// halted is set by halt: the container is stopped for good, never started again (write.go).
	halted atomic.Bool
	// loopDone is closed when its kubelet loop has ended.
	loopDone chan struct{}
}

// instances are the instances of a container (a workload container, the FUSE sidecar): the current one and how
// many were started.
type instances struct {
	mu     sync.Mutex
	cur    *proc
	prev   *proc         // the instance before cur
	output chan struct{} // closed when the current instance's output is fully read
	starts int           // successful starts so far: the next instance's number
}

func (i *instances) current() *proc {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.cur
}

// waitOutput waits (at most 2 s) until the current instance's output is read.
func (i *instances) waitOutput() {
	i.mu.Lock()
	out := i.output
	i.mu.Unlock()
	if out != nil {
		select {
		case <-out:
		case <-time.After(2 * time.Second):
		}
	}
}

func (c *container) event(kind scenarios.Kind, e scenarios.Event) {
	e.Source, e.Kind, e.Container = scenarios.SrcKubelet, kind, c.spec.Name
	c.b.rec.Add(e)
}

// loop is kubelet's handling of this container for the life of the pod: a sync right after the container
// exits (kubelet's PLEG event), then one per pod-worker period (one back-off base) while it is in back-off or
// its starts fail.
func (c *container) loop(ctx context.Context) {
	defer c.b.pod.wg.Done()
	defer close(c.loopDone)
	var finished time.Time // FinishedAt of the last exited instance
	exited := false
	first := true
	inBackOff := false
	for ctx.Err() == nil && !c.halted.Load() {
		if c.reset.Swap(false) {
			exited = false // removed by RestartAllContainers: no status, no back-off
		}
		if exited && !c.bo.sync(finished, time.Now()) {
			if !inBackOff { // kubelet repeats the event at every sync; once per wait is enough here
				c.event(scenarios.KBackOff, scenarios.Event{Instance: c.starts,
					Message: fmt.Sprintf("Back-off restarting failed container %s (back-off %s)", c.spec.Name, c.bo.delay)})
				inBackOff = true
			}
			if scenarios.Sleep(ctx, c.bo.base) != nil {
				return
			}
			continue
		}
		inBackOff = false
		p, err := c.start()
		if first {
			close(c.firstAttempt)
			first = false
		}
		if err != nil {
			var se *startError
			msg, cause := err.Error(), err
			if errors.As(err, &se) {
				msg, cause = se.Message, se.Cause
			}
			c.b.logf("container %s: start failed: %s (cause: %v)", c.spec.Name, msg, cause)
			c.event(scenarios.KStartFailed, scenarios.Event{Instance: c.starts, Message: "Error: " + msg,
				Errno: contract.ErrnoName(cause), Detail: fmt.Sprint(cause)})
			if errors.Is(err, errInitFailed) {
				// runc failed after containerd created the container: kubelet sees an exited container.
				finished, exited = time.Now(), true
			}
			if scenarios.Sleep(ctx, c.bo.base) != nil { // the pod worker's next sync
				return
			}
			continue
		}
		select {
		case <-p.done:
		case <-ctx.Done():
			return // teardown stops the process
		}
		c.waitOutput()
		code := p.exitCode()
		reason := "Error"
		switch {
		case c.reset.Load():
			reason = restartingAll // killed by another container's RestartAllContainers
		case code == 0:
			reason = "Completed"
		}
		c.event(scenarios.KContainerExited, scenarios.Event{Time: p.exitTime, Instance: c.starts - 1,
			ExitCode: scenarios.IntPtr(code), Message: reason})
		finished, exited = p.exitTime, true
		if c.halted.Load() {
			c.b.logf("container %s: exited with %d, stopped for good by the runner: not restarted", c.spec.Name, code)
			return
		}
		if c.restartsPod(code) {
			c.b.restartAll(c)
			continue
		}
		if !c.b.sc.Pod.RestartPolicy.Restarts(code) {
			c.b.logf("container %s: exited with %d, restart policy %s: not restarted", c.spec.Name, code, c.b.sc.Pod.RestartPolicy)
			return
		}
	}
}

var errInitFailed = errors.New("container init failed")

// start is one start attempt: kubelet's makeMounts (subPath), containerd's stat of the mount sources, runc's
// mounts in new namespaces, exec of the workload.
func (c *container) start() (*proc, error) {
	b := c.b
	id := randomID()
	src := b.vol.target
	if c.spec.SubPath != "" {
		sp := subPath{root: b.root, podUID: b.pod.uid, volumeName: pvName, container: c.spec.Name, index: 0,
			volumePath: b.vol.target, subPath: c.spec.SubPath, mountName: volumeName, kubelet: b.kubelet}
		target, err := sp.prepare(func(f string, a ...any) { b.logf("container %s: "+f, append([]any{c.spec.Name}, a...)...) })
		if err != nil {
			return nil, err
		}
		src = target
	}
	// containerd (CRI WithMounts) stats every bind source; a missing one would be created, any other error
	// fails the container's creation.
	if _, err := os.Stat(src); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, &startError{
			Message: fmt.Sprintf("failed to generate container %q spec: failed to generate spec: failed to stat %q: %v", id, src, err),
			Cause:   err,
		}
	}

	prop := "rprivate"
	if c.spec.Prop() == scenarios.PropagationHostToContainer {
		prop = "rslave"
	}
	c.mu.Lock()
	inst := c.starts
	c.mu.Unlock()
	logPath := filepath.Join(b.dir, "containers", fmt.Sprintf("%s-%d.log", c.spec.Name, inst))
	p, err := b.launch(initConfig{
		Mounts: []initMount{{Source: src, Target: c.spec.Mount(), Propagation: prop}},
		Argv:   append([]string{b.opts.WorkloadPath}, c.spec.WorkloadArgs(b.opts.ReadInterval)...),
		Pod:    b.pod.uid,
	}, logPath)
	if err != nil {
		return nil, err
	}
	logR, err := os.Open(logPath)
	if err != nil {
		_ = p.stop(time.Second)
		return nil, err
	}

	c.mu.Lock()
	c.starts++
	c.prev, c.cur = c.cur, p
	output := make(chan struct{})
	c.output = output
	c.mu.Unlock()
	c.event(scenarios.KContainerStarted, scenarios.Event{Instance: inst,
		Message: fmt.Sprintf("pid %d, propagation %s", p.pid(), c.spec.Prop())})
	b.logf("container %s#%d: started pid %d, %s → %s (%s), id %.12s, log %s", c.spec.Name, inst, p.pid(), src, c.spec.Mount(), prop, id, logPath)
	go func() {
		defer close(output)
		defer logR.Close()
		prefix := fmt.Sprintf("%s#%d", c.spec.Name, inst)
		scenarios.TailLines(logR, p.done, 20*time.Millisecond, func(line []byte) {
			b.logs.workload.WriteLine(prefix, line)
			b.rec.Add(scenarios.ParseWorkloadLine(line, c.spec.Name, inst, time.Now()))
		})
	}()
	return p, nil
}

// launch starts a container: this binary re-executed as the container's init (see MaybeInit) in new mount
// and PID namespaces, with cfg. Like a container runtime, it sends the container's output to a log file that
// outlives the runner (a pipe would kill the workload with SIGPIPE once the runner is gone, e.g. after
// --keep), which the caller tails. It returns once the init has exec'd the command, or the init's error.
func (b *Backend) launch(cfg initConfig, logPath string) (*proc, error) {
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer statusR.Close()
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		statusW.Close()
		return nil, err
	}
	logW, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		statusW.Close()
		return nil, err
	}
	cmd := exec.Command("/proc/self/exe", initArg, string(cfgJSON))
	cmd.Stdout, cmd.Stderr = logW, logW // like kubectl logs: both streams
	cmd.ExtraFiles = []*os.File{statusW}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID, Setpgid: true, Pdeathsig: b.deathSig(),
	}
	var cg *podcgroup.Cgroup
	if cfg.Pod != "" {
		if cg, err = podcgroup.Create(cfg.Pod, filepath.Base(logPath)); err != nil {
			statusW.Close()
			logW.Close()
			return nil, err
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cg.FD()
	}
	err = cmd.Start()
	statusW.Close()
	logW.Close()
	if err != nil {
		if cg != nil {
			_ = cg.Remove(0)
		}
		return nil, fmt.Errorf("start container init: %w", err)
	}
	p := startedProc(cmd)
	if cg != nil {
		go func() {
			<-p.done
			if err := cg.Remove(10 * time.Second); err != nil {
				b.logf("container cgroup: %v", err)
			}
		}()
	}
	// The status pipe closes on the command's exec (close-on-exec) or carries the init's error.
	msg := make([]byte, 4096)
	n, _ := statusR.Read(msg)
	if n > 0 {
		<-p.done
		return nil, &startError{
			Message: "failed to create containerd task: failed to create shim task: OCI runtime create failed: " + string(msg[:n]),
			Cause:   errInitFailed,
		}
	}
	return p, nil
}
