package remediate

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/flowcontrol"
)

// manyClaims is a pod whose container mounts n claims, claim-i bound to pv-i, all of them the plugin's.
func manyClaims(t testing.TB, n int, opts ...podOpt) (*world, *corev1.Pod) {
	t.Helper()
	p := pod("web", append([]podOpt{ownedBy("apps/v1", "ReplicaSet"), func(p *corev1.Pod) {
		p.Spec.Volumes = nil
		p.Spec.Containers[0].VolumeMounts = nil
		for i := range n {
			name := fmt.Sprintf("v%d", i)
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: fmt.Sprintf("claim-%d", i)}}})
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: name, MountPath: "/" + name})
		}
	}}, opts...)...)
	w := newWorld(t, "v1.36.3", func(c *Config) { c.DryRun = true }, p)
	for i := range n {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%d", i), Namespace: p.Namespace},
			Spec: corev1.PersistentVolumeClaimSpec{VolumeName: fmt.Sprintf("pv-%d", i)}}
		if _, err := w.client.CoreV1().PersistentVolumeClaims(p.Namespace).Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return w, p
}

// requests counts the API requests the remediator made since the last call, by verb and resource.
func (w *world) requests() map[string]int {
	n := map[string]int{}
	for _, a := range w.client.Actions() {
		n[a.GetVerb()+" "+a.GetResource().Resource]++
	}
	w.client.ClearActions()
	return n
}

// TestPassReadsEachClaimOnce: a pass reads a claim at most once, however many of the pod's targets it has to
// match against its claims, and not at all when no container is older than the mounts (then no rule needs to
// know which pod volume a target is).
func TestPassReadsEachClaimOnce(t *testing.T) {
	const n = 11
	w, p := manyClaims(t, n)
	for i := range n {
		w.published(p, fmt.Sprintf("pv-%d", i), fmt.Sprintf("vol-%d", i), t0) // mounted before the container started
	}
	w.requests()
	w.pass()
	if got := w.requests(); got["get persistentvolumeclaims"] != 0 {
		t.Errorf("pass with every container younger than its mounts: requests %v, want no claim read", got)
	}
	for i := range n {
		w.published(p, fmt.Sprintf("pv-%d", i), fmt.Sprintf("vol-%d", i), repaired)
	}
	w.pass()
	got := w.requests()
	if got["get persistentvolumeclaims"] != n {
		t.Errorf("pass over %d repaired targets of a pod with %d claims: requests %v, want each claim read once", n, n, got)
	}
	t.Logf("requests of a pass with %d repaired claims: %v", n, got)
}

// gatedHealth answers only once want calls are in flight together (or, failing that, after a second): it
// records how many calls the remediator makes at once.
type gatedHealth struct {
	want int

	mu       sync.Mutex
	inFlight int
	max      int
	calls    int
	open     chan struct{}
	timer    *time.Timer
}

func (g *gatedHealth) Problem(ctx context.Context, _, _ string) (string, error) {
	g.mu.Lock()
	g.calls++
	g.inFlight++
	g.max = max(g.max, g.inFlight)
	if g.timer == nil {
		g.timer = time.AfterFunc(time.Second, func() { g.release() })
	}
	if g.inFlight == g.want {
		g.releaseLocked()
	}
	g.mu.Unlock()
	select {
	case <-g.open:
	case <-ctx.Done():
	}
	g.mu.Lock()
	g.inFlight--
	g.mu.Unlock()
	return "", nil
}

func (g *gatedHealth) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.releaseLocked()
}

func (g *gatedHealth) releaseLocked() {
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// TestHealthChecksInParallel: the plugin is asked about a pass's targets concurrently, at most healthWorkers at
// a time, so that a pass with several stuck targets costs about one health timeout, not one per target.
func TestHealthChecksInParallel(t *testing.T) {
	for _, n := range []int{3, healthWorkers + 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			g := &gatedHealth{want: min(n, healthWorkers), open: make(chan struct{})}
			w, p := manyClaims(t, n)
			w.r.cfg.Health = g
			for i := range n {
				w.published(p, fmt.Sprintf("pv-%d", i), fmt.Sprintf("vol-%d", i), t0)
			}
			w.pass()
			g.mu.Lock()
			defer g.mu.Unlock()
			g.timer.Stop()
			if g.calls != n || g.max != g.want {
				t.Fatalf("%d targets: %d health calls, at most %d at once; want %d calls, %d at once", n, g.calls, g.max, n, g.want)
			}
		})
	}
}

// BenchmarkPassManyClaims times a pass over a pod with 11 repaired claims through client-go's client-side rate
// limiter at the command's QPS and burst (a fresh one per pass, as after the interval between two passes); it
// reports the API requests of a pass.
func BenchmarkPassManyClaims(b *testing.B) {
	const n = 11
	w, p := manyClaims(b, n)
	w.r.cfg.Log = logr.Discard()
	for i := range n {
		w.published(p, fmt.Sprintf("pv-%d", i), fmt.Sprintf("vol-%d", i), repaired)
	}
	var limiter flowcontrol.RateLimiter
	w.client.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		limiter.Accept()
		return false, nil, nil
	})
	w.requests()
	for b.Loop() {
		limiter = flowcontrol.NewTokenBucketRateLimiter(apiQPS, apiBurst)
		if err := w.r.Pass(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	total := 0
	for _, c := range w.requests() {
		total += c
	}
	b.ReportMetric(float64(total)/float64(b.N), "requests/pass")
}

// stuckNode is a plugin whose every NodeGetVolumeHealth hangs (its own health timeout never fires).
type stuckNode struct{ csi.NodeClient }

func (stuckNode) NodeGetVolumeHealth(ctx context.Context, _ *csi.NodeGetVolumeHealthRequest, _ ...grpc.CallOption) (*csi.NodeGetVolumeHealthResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// BenchmarkPassStuckTargets times a pass over 8 targets on which the plugin does not answer, with a health
// timeout of 100 ms.
func BenchmarkPassStuckTargets(b *testing.B) {
	const n = 8
	w, p := manyClaims(b, n)
	w.r.cfg.Log = logr.Discard()
	w.r.cfg.Health = PluginHealth{Node: stuckNode{}, Timeout: 100 * time.Millisecond}
	for i := range n {
		w.published(p, fmt.Sprintf("pv-%d", i), fmt.Sprintf("vol-%d", i), repaired)
	}
	for b.Loop() {
		if err := w.r.Pass(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
