package remediate

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/driver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/restore"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// bins builds dummy-fuse once for the tests of this package.
var bins testenv.Binaries

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Remove()
	os.Exit(code)
}

// serverLog keeps the FUSE servers the plugin starts, so that the test can kill one.
type serverLog struct {
	fusemode.Mode
	mu      sync.Mutex
	servers []fusemode.Server
}

func (l *serverLog) Start(ctx context.Context, req fusemode.Request) (fusemode.Server, error) {
	s, err := l.Mode.Start(ctx, req)
	if err == nil {
		l.mu.Lock()
		l.servers = append(l.servers, s)
		l.mu.Unlock()
	}
	return s, err
}

// TestWithThePlugin runs the remediator against the real plugin with real FUSE mounts in kubelet's layout: the
// evidence comes from the plugin's records and its NodeGetVolumeHealth over the socket, as on a node. A
// controller-owned pod whose volume died is deleted; after the plugin repaired the volume, a bare pod whose
// container started before the repair gets a Warning event and stays, and a pod whose container started after
// it is left alone.
func TestWithThePlugin(t *testing.T) {
	testenv.RequireFUSE(t)
	root := plugintest.ShortDir(t)
	child, err := fusemode.NewChild(fusemode.Options{Server: fuseserver.Spec{Path: bins.Path(t, "dummy-fuse")}})
	if err != nil {
		t.Fatal(err)
	}
	mode := &serverLog{Mode: child}
	stateDir := filepath.Join(root, "state")
	d, err := driver.New(driver.Config{Endpoint: "unix://" + filepath.Join(root, "csi.sock"), NodeID: node, StateDir: stateDir, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if n, err := mounts.UnmountUnder(root); err != nil || n > 0 {
			t.Logf("cleanup unmounted %d leftover mounts (err %v)", n, err)
		}
		stop, cancelStop := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancelStop()
		for _, s := range mode.servers {
			_ = s.Stop(stop)
		}
	})
	conn, err := grpc.NewClient("unix://"+d.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	nodeClient := csi.NewNodeClient(conn)
	for deadline := time.Now().Add(30 * time.Second); !d.Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("plugin not ready")
		}
	}

	kubelet := plugintest.Kubelet{Root: root, Driver: driver.DefaultDriverName}
	capability := plugintest.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER)
	stage := func(vol string) {
		t.Helper()
		if _, err := nodeClient.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: kubelet.Staging(vol), VolumeCapability: capability}); err != nil {
			t.Fatal(err)
		}
	}
	publish := func(vol string, p *corev1.Pod) string {
		t.Helper()
		target := kubeletpath.Target(root, string(p.UID), "data")
		if _, err := nodeClient.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: kubelet.Staging(vol), TargetPath: target, VolumeCapability: capability}); err != nil {
			t.Fatal(err)
		}
		return target
	}
	// One volume per pod: "dead" loses its server for good; "fixed" is repaired by the plugin. Containers start
	// after their volume is published, as kubelet does.
	stage("vol-dead")
	stage("vol-fixed")
	web, before := pod("web", ownedBy("apps/v1", "ReplicaSet")), pod("before")
	deadTarget := publish("vol-dead", web)
	publish("vol-fixed", before)
	startedAt(time.Now())(web)
	startedAt(time.Now())(before)

	client := fake.NewClientset()
	for _, p := range []*corev1.Pod{web, before} {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := New(Config{Client: client.CoreV1(), Owners: ownersOf(t, web, before), NodeName: node, KubeletDir: root, StateDir: stateDir, Strategy: restore.Rebind,
		Health: PluginHealth{Node: nodeClient, Timeout: 20 * time.Second}, Grace: 0, RateLimit: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	pass := func() {
		t.Helper()
		if err := r.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(p *corev1.Pod) bool {
		_, err := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		return err == nil
	}
	events := func(p *corev1.Pod) []string {
		l, err := client.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range l.Items {
			if e.InvolvedObject.UID == p.UID {
				out = append(out, e.Reason+": "+e.Message)
			}
		}
		return out
	}

	pass()
	if !exists(web) || !exists(before) || len(events(web))+len(events(before)) != 0 {
		t.Fatal("acted on healthy volumes")
	}

	// Both servers die; only vol-fixed is repaired (as NodeStage/NodePublish or the restore do).
	for _, s := range mode.servers {
		if err := syscall.Kill(s.PID(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-s.Done()
	}
	plugintest.WaitDead(t, deadTarget)
	time.Sleep(1100 * time.Millisecond) // start times have a resolution of one second
	stage("vol-fixed")
	publish("vol-fixed", before)
	after := pod("after")
	publish("vol-fixed", after)
	startedAt(time.Now())(after)
	if _, err := client.CoreV1().Pods(after.Namespace).Create(ctx, after, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	pass()
	if exists(web) {
		t.Errorf("the ReplicaSet's pod with a dead volume is still there (events %q)", events(web))
	}
	if ev := events(web); len(ev) != 1 || !strings.Contains(ev[0], contract.ReasonDeleted) || !strings.Contains(ev[0], driver.ReasonServerGone) {
		t.Errorf("events of the deleted pod %q, want one %s naming %s", ev, contract.ReasonDeleted, driver.ReasonServerGone)
	}
	if !exists(before) {
		t.Error("the bare pod was deleted")
	}
	if ev := events(before); len(ev) != 1 || !strings.Contains(ev[0], contract.ReasonLeftAlone) || !strings.Contains(ev[0], "still holds the mount of volume vol-fixed") {
		t.Errorf("events of the bare pod %q, want one %s", ev, contract.ReasonLeftAlone)
	}
	if !exists(after) || len(events(after)) != 0 {
		t.Errorf("acted on the pod started after the repair: events %q", events(after))
	}
}
