package kube

// Preflight: what the kube backend needs of this machine, checked once before any scenario runs. Without it a
// missing cluster showed only in each run's Setup, after the runner had printed its verdicts (FAIL lines about
// a reader that never failed), and a KUBECONFIG naming a missing file fell back to localhost:8080 in silence.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// PreflightTimeout bounds the call that checks that the cluster answers: a cluster that is up answers /version
// in milliseconds; one that is down or unreachable should not keep the user waiting for a TCP timeout.
const PreflightTimeout = 5 * time.Second

// PreflightEnv is what Preflight reads of this machine besides Options and $KUBECONFIG: a parameter, so that a
// test needs no cluster, no HOME of its own and no service account.
type PreflightEnv struct {
	// HomeKubeconfig is the kubeconfig client-go falls back to without $KUBECONFIG (~/.kube/config).
	HomeKubeconfig string
	// InCluster reports whether client-go would use a pod's service account (rest.InClusterConfig).
	InCluster func() bool
	// Timeout bounds the call that checks that the cluster answers (PreflightTimeout).
	Timeout time.Duration
}

// ThisMachine is the PreflightEnv of this process.
func ThisMachine() PreflightEnv {
	return PreflightEnv{
		HomeKubeconfig: clientcmd.RecommendedHomeFile,
		InCluster:      func() bool { _, err := rest.InClusterConfig(); return err == nil },
		Timeout:        PreflightTimeout,
	}
}

// Preflight checks that opts can reach a cluster before any scenario runs, and returns one line saying what to
// do when they cannot: a --kubeconfig or KUBECONFIG naming a file that does not exist, no configuration at all
// (client-go would try localhost:8080), a kubeconfig client-go cannot use, a cluster that does not answer
// within env.Timeout, or options the backend cannot use (no image to run).
func Preflight(ctx context.Context, opts Options, env PreflightEnv) error {
	if err := kubeconfigExists(opts, env); err != nil {
		return err
	}
	cfg, err := RESTConfig(opts)
	if err != nil {
		return fmt.Errorf("the kubeconfig names no usable cluster: %w", err)
	}
	if err := answers(ctx, cfg, env.Timeout); err != nil {
		return err
	}
	// After the cluster: make cluster-up, which a cluster that is down asks for, makes the image too.
	if err := opts.defaults(); err != nil {
		return fmt.Errorf("kube backend: %w", err)
	}
	return nil
}

// kubeconfigExists checks that the kubeconfig files client-go will read exist: client-go skips a missing file
// of $KUBECONFIG and, with nothing left, talks to localhost:8080, which is never the cluster the user meant.
func kubeconfigExists(opts Options, env PreflightEnv) error {
	hint := fmt.Sprintf("point it at your cluster's kubeconfig (make cluster-up writes %s)", clusterKubeconfig())
	if opts.Kubeconfig != "" {
		if !fileExists(opts.Kubeconfig) {
			return fmt.Errorf("--kubeconfig names %s, which does not exist: %s", opts.Kubeconfig, hint)
		}
		return nil
	}
	if list := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); list != "" {
		for _, p := range filepath.SplitList(list) {
			if _, err := os.Stat(p); p != "" && errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("KUBECONFIG names %s, which does not exist: %s", p, hint)
			}
		}
		return nil
	}
	if fileExists(env.HomeKubeconfig) || (env.InCluster != nil && env.InCluster()) {
		return nil
	}
	none := fmt.Sprintf("no cluster is configured (KUBECONFIG is unset, %s does not exist, and this is not a pod of a cluster)", env.HomeKubeconfig)
	if p := clusterKubeconfig(); fileExists(p) {
		return fmt.Errorf("%s: the from-source cluster's kubeconfig is there, export KUBECONFIG=%s", none, p)
	}
	return fmt.Errorf("%s: start one with make cluster-up (the from-source cluster; then export KUBECONFIG=%s) or make kind-up (kind, with Docker)", none, clusterKubeconfig())
}

// answers asks the cluster of cfg for its version, within timeout, and says what its failure means.
func answers(ctx context.Context, cfg *rest.Config, timeout time.Duration) error {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = timeout
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("the kubeconfig names no usable cluster: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err = dc.ServerVersionWithContext(ctx)
	var (
		uerr   *url.Error
		status apierrors.APIStatus
		certs  *tls.CertificateVerificationError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &certs):
		return fmt.Errorf("the cluster at %s does not have the certificate the kubeconfig trusts (%v): is the kubeconfig the current cluster's? (make cluster-up writes it anew)", cfg.Host, certs.Err)
	case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
		return fmt.Errorf("the cluster at %s refuses the kubeconfig's credentials (%v): is the kubeconfig the current cluster's?", cfg.Host, err)
	case errors.As(err, &status):
		return fmt.Errorf("the cluster at %s answers its version with an error: %w", cfg.Host, err)
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &uerr) && uerr.Timeout()):
		err = fmt.Errorf("no answer within %s", timeout)
	case errors.As(err, &uerr):
		err = uerr.Err // the URL adds nothing to the host
	}
	return fmt.Errorf("the cluster at %s does not answer (%v): is it up? (make cluster-up)", cfg.Host, err)
}

// clusterDir is the from-source cluster's state dir (hack/cluster/lib.sh: $DFC_CLUSTER_DIR, else
// $DFC_CACHE_DIR/cluster, else ~/.cache/dummy-fuse-csi/cluster); "" when there is no home to find it in.
func clusterDir() string {
	if dir := os.Getenv("DFC_CLUSTER_DIR"); dir != "" {
		return dir
	}
	cache := os.Getenv("DFC_CACHE_DIR")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(home, ".cache", "dummy-fuse-csi")
	}
	return filepath.Join(cache, "cluster")
}

// clusterKubeconfig is the kubeconfig make cluster-up writes (hack/cluster/lib.sh: KUBECONFIG_PATH).
func clusterKubeconfig() string {
	if dir := clusterDir(); dir != "" {
		return filepath.Join(dir, "kubeconfig")
	}
	return "$HOME/.cache/dummy-fuse-csi/cluster/kubeconfig"
}
