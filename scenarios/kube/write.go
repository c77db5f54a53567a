package kube

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver/backing"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// The writers' end (scenarios.StorageReader) on a cluster: the run ends the writing pod as a job ends (deleted,
// its writers get SIGTERM and close their files within the pod's grace), then reads what they wrote from the
// storage behind the server at the objectURL of the server's spec, with the settings the chart gave the server
// (its container's --fuse-server-opt or --relay-server-opt arguments). A storage on the pod's loopback (the fake
// GCS server beside gcsfuse) is read through the API server's proxy to the pod that runs the server; any other
// address directly.

var _ scenarios.StorageReader = (*Backend)(nil)

// CollectWrites implements scenarios.StorageReader.
func (b *Backend) CollectWrites(ctx context.Context) error {
	p, deleted, _ := b.workload.get()
	if p == nil || deleted {
		return errors.New("the workload pod is gone already: its writers cannot be stopped as a job ends")
	}
	if b.sc.Pod.Controller != "" {
		return fmt.Errorf("the pod's %s would start its writers again: the rows that write use a bare pod", b.sc.Pod.Controller)
	}
	if err := b.stopProbe(ctx); err != nil {
		return err
	}
	// The run's own deletion, not a kill of the pod component (onWorkloadPod).
	b.pod.deleting.Store(true)
	defer b.pod.deleting.Store(false)
	uid := p.UID
	b.progress("deleting pod %s: its writers get SIGTERM and close their files (grace %s), then the storage is read", p.Name, scenarios.WriterGrace)
	if err := b.cs.CoreV1().Pods(b.n.namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(uid))}); err != nil {
		return fmt.Errorf("delete pod %s: %w", p.Name, err)
	}
	if _, err := b.workload.await(ctx, scenarios.WriterGrace+time.Minute, func(p *corev1.Pod, deleted bool) bool { return deleted || p.UID != uid }); err != nil {
		return fmt.Errorf("pod %s not gone (a writer's last close did not end? see plugin.log): %w", p.Name, err)
	}
	for _, w := range b.sc.Writers() {
		// The writer logs its exit once its file is closed; its log stream may deliver that line after the pod is gone.
		exit := func(e scenarios.Event) bool { return e.Container == w.Name && e.Kind == scenarios.KWorkloadExit }
		if err := b.rec.Await(ctx, 15*time.Second, 100*time.Millisecond, "writer "+w.Name+"'s exit line in its log (workload.log)", exit, nil); err != nil {
			return err
		}
	}
	read, err := b.storageReader(ctx)
	if err != nil {
		return err
	}
	b.sc.StoreWrites(ctx, b.rec, read, b.logf)
	return nil
}

// storageReader returns what reads a stored object by its name: the server's objectURL with the settings of the
// container that runs the server, fetched directly or, for the pod's loopback, through the API server's proxy.
func (b *Backend) storageReader(ctx context.Context) (func(context.Context, string) ([]byte, error), error) {
	k, err := fuseserver.Lookup(b.sc.Plugin.Server())
	if err != nil {
		return nil, err
	}
	pods, ctr, flag := b.plugins, pluginContainer, "--fuse-server-opt="
	if b.sc.Plugin.Topology().Has(topology.KeeperContainer) {
		pods, ctr, flag = b.keeper.pods, keeperContainer, "--relay-server-opt="
	}
	pp, _ := b.runningPod(pods)
	if pp == nil {
		return nil, fmt.Errorf("no running %s pod on node %s: the storage's settings are its container's arguments", ctr, b.node)
	}
	pod, _, _ := pp.w.get()
	c, ok := podContainer(pod, ctr)
	if !ok {
		return nil, fmt.Errorf("pod %s has no container %s", pp.name, ctr)
	}
	settings := serverSettings(c.Args, flag)
	b.logf("storage: %s's settings in pod %s: %v", k.Name, pp.name, settings)
	return func(ctx context.Context, name string) ([]byte, error) {
		raw, err := k.ObjectURL(settings, name)
		if err != nil {
			return nil, err
		}
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("objectURL %s: %w", raw, err)
		}
		if ip := net.ParseIP(u.Hostname()); !(u.Hostname() == "localhost" || (ip != nil && ip.IsLoopback())) {
			return backing.Read(ctx, raw)
		}
		params := map[string]string{}
		for k, v := range u.Query() {
			params[k] = v[0]
		}
		data, err := b.cs.CoreV1().Pods(b.n.namespace).ProxyGet(u.Scheme, pp.name, u.Port(), u.Path, params).DoRaw(ctx)
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("GET %s in pod %s: %w", raw, pp.name, fs.ErrNotExist)
		case err != nil:
			return nil, fmt.Errorf("GET %s in pod %s through the API server: %w", raw, pp.name, err)
		}
		return data, nil
	}, nil
}

// serverSettings are the server settings (name=value) among a container's arguments given with flag.
func serverSettings(args []string, flag string) map[string]string {
	out := map[string]string{}
	for _, a := range args {
		if kv, ok := strings.CutPrefix(a, flag); ok {
			if k, v, ok := strings.Cut(kv, "="); ok {
				out[k] = v
			}
		}
	}
	return out
}

// podContainer returns pod p's container called name.
func podContainer(p *corev1.Pod, name string) (corev1.Container, bool) {
	if p != nil {
		for _, c := range p.Spec.Containers {
			if c.Name == name {
				return c, true
			}
		}
	}
	return corev1.Container{}, false
}
