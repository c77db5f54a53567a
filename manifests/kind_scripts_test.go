package manifests_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// kind cannot run here (no Docker engine, no node image), so hack/kind-up.sh and hack/kind-down.sh are
// tested against stub commands that record their arguments: the error paths for missing tools and a missing
// engine, and the sequence of commands on the happy path.

// stubs is a directory of fake kind/docker/helm/kubectl/make commands writing their argv to a log.
type stubs struct {
	dir, log, imageOut string
}

// stub scripts; $STUB_LOG gets one line per call: the command's name and arguments.
const stubHeader = "#!/bin/bash\necho \"$(basename \"$0\") $*\" >>\"$STUB_LOG\"\n"

func newStubs(t *testing.T, scripts map[string]string) stubs {
	t.Helper()
	testenv.Integration(t, "runs hack/ scripts with bash and stand-in commands")
	dir := t.TempDir()
	s := stubs{dir: dir, log: filepath.Join(dir, "calls.log"), imageOut: filepath.Join(dir, "images")}
	defaults := map[string]string{
		"kind":   `[ "$1 $2" = "get clusters" ] && [ -n "${STUB_CLUSTERS:-}" ] && echo "$STUB_CLUSTERS"; exit 0`,
		"docker": `exit 0`,
		"helm":   `exit 0`,
		// What hack/mkimage/image.sh writes: the ref file and the tagged archive.
		"make": `v=${2#VERSION=}; mkdir -p "$IMAGE_OUTPUT"; echo "dummy-fuse-csi:$v" >"$IMAGE_OUTPUT/dummy-fuse-csi.ref"; : >"$IMAGE_OUTPUT/dummy-fuse-csi-$v.tar"; : >"$IMAGE_OUTPUT/dummy-fuse-csi-$v-next.tar"`,
		"kubectl": `case "$*" in
  *"get daemonset"*) echo daemonset.apps/dummy-fuse-csi-node ;;
  *"get csidriver"*) echo dummy-fuse-csi ;;
  *"get csinode"*) echo dummy-fuse-csi ;;
  *"--dry-run=client"*) echo "apiVersion: v1" ;;
  *"apply -f -"*) cat >/dev/null ;;
esac`,
	}
	for name, body := range defaults {
		if b, ok := scripts[name]; ok {
			body = b
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(stubHeader+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// run runs a hack script with the stubs and a PATH without any real kind/docker/helm; it returns the exit
// code, stderr and the recorded calls.
func (s stubs) run(t *testing.T, script string, env ...string) (int, string, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join("..", "hack", script))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append([]string{
		"PATH=/usr/bin:/bin", "HOME=" + s.dir, "STUB_LOG=" + s.log, "IMAGE_OUTPUT=" + s.imageOut,
		"KIND=" + filepath.Join(s.dir, "kind"), "DOCKER=" + filepath.Join(s.dir, "docker"),
		"HELM=" + filepath.Join(s.dir, "helm"), "KUBECTL=" + filepath.Join(s.dir, "kubectl"),
		"MAKE=" + filepath.Join(s.dir, "make"),
	}, env...)
	err := cmd.Run()
	code := 0
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s: %v", script, err)
	}
	t.Logf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", script, code, stdout.String(), stderr.String())
	data, err := os.ReadFile(s.log)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var calls []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if l != "" {
			calls = append(calls, l)
		}
	}
	return code, stderr.String(), calls
}

// index returns the position of the first call starting with prefix, or -1.
func index(calls []string, prefix string) int {
	return slices.IndexFunc(calls, func(c string) bool { return strings.HasPrefix(c, prefix) })
}

func TestKindUpMissingTools(t *testing.T) {
	s := newStubs(t, nil)
	code, stderr, calls := s.run(t, "kind-up.sh", "KIND=/nonexistent/kind", "HELM=/nonexistent/helm")
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	// Every missing command is named at once, with the way out for users without Docker.
	for _, want := range []string{"kind (/nonexistent/kind)", "helm (/nonexistent/helm)", "make cluster-up"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not mention %q", want)
		}
	}
	if len(calls) != 0 {
		t.Errorf("commands ran although tools are missing: %q", calls)
	}
}

func TestKindUpNoDockerEngine(t *testing.T) {
	s := newStubs(t, map[string]string{"docker": `exit 1`})
	code, stderr, calls := s.run(t, "kind-up.sh")
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if !strings.Contains(stderr, "no Docker engine") || !strings.Contains(stderr, "make cluster-up") {
		t.Errorf("stderr does not explain the missing engine and the alternative:\n%s", stderr)
	}
	if !slices.Equal(calls, []string{"docker info"}) {
		t.Errorf("calls %q, want only `docker info` before giving up", calls)
	}
}

func TestKindUpCreatesLoadsInstalls(t *testing.T) {
	def := loadChartDefaults(t)
	tag := strings.TrimPrefix(def.image, "dummy-fuse-csi:")
	s := newStubs(t, nil)
	code, _, calls := s.run(t, "kind-up.sh", "HELM_SET=csi.plugin.restoreStrategy=stack")
	if code != 0 {
		t.Fatalf("exit code %d; calls %q", code, calls)
	}
	steps := []string{
		"kind create cluster --name dummy-fuse-csi --config manifests/kind-config.yaml",
		"make image VERSION=" + tag,
		"kind load image-archive " + filepath.Join(s.imageOut, "dummy-fuse-csi-"+tag+".tar") + " --name dummy-fuse-csi",
		"kind load image-archive " + filepath.Join(s.imageOut, "dummy-fuse-csi-"+tag+"-next.tar") + " --name dummy-fuse-csi",
		"kubectl --context kind-dummy-fuse-csi label namespace dummy-fuse-csi --overwrite pod-security.kubernetes.io/enforce=privileged",
		"helm upgrade --install dummy-fuse-csi chart/ --kube-context kind-dummy-fuse-csi --namespace dummy-fuse-csi --set image.tag=" + tag,
		"kubectl --context kind-dummy-fuse-csi -n dummy-fuse-csi rollout status daemonset.apps/dummy-fuse-csi-node",
		"kubectl --context kind-dummy-fuse-csi get csinode",
	}
	last := -1
	for _, step := range steps {
		i := index(calls, step)
		if i < 0 {
			t.Errorf("no call %q in %q", step, calls)
			continue
		}
		if i < last {
			t.Errorf("call %q out of order in %q", step, calls)
		}
		last = i
	}
	if i := index(calls, "helm upgrade"); i >= 0 && !strings.Contains(calls[i], "--set csi.plugin.restoreStrategy=stack") {
		t.Errorf("HELM_SET not passed to helm: %q", calls[i])
	}
}

func TestKindUpReusesCluster(t *testing.T) {
	s := newStubs(t, nil)
	code, _, calls := s.run(t, "kind-up.sh", "STUB_CLUSTERS=other\ndummy-fuse-csi")
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if index(calls, "kind create") >= 0 {
		t.Errorf("created a cluster although it exists: %q", calls)
	}
	if index(calls, "kind load image-archive") < 0 {
		t.Errorf("image not loaded into the existing cluster: %q", calls)
	}
}

func TestKindUpImageNotWritten(t *testing.T) {
	s := newStubs(t, map[string]string{"make": `exit 0`})
	code, stderr, calls := s.run(t, "kind-up.sh")
	if code != 1 || !strings.Contains(stderr, "make image wrote no") {
		t.Errorf("exit %d, stderr %q: want a clear failure when make image wrote nothing", code, stderr)
	}
	if index(calls, "kind load") >= 0 || index(calls, "helm") >= 0 {
		t.Errorf("went on after the image was missing: %q", calls)
	}
}

func TestKindDown(t *testing.T) {
	t.Run("absent", func(t *testing.T) {
		s := newStubs(t, nil)
		code, _, calls := s.run(t, "kind-down.sh")
		if code != 0 || index(calls, "kind delete") >= 0 {
			t.Errorf("exit %d, calls %q: want success without a delete", code, calls)
		}
	})
	t.Run("present", func(t *testing.T) {
		s := newStubs(t, nil)
		code, _, calls := s.run(t, "kind-down.sh", "STUB_CLUSTERS=dummy-fuse-csi", "KIND_CLUSTER_NAME=dummy-fuse-csi")
		if code != 0 || index(calls, "kind delete cluster --name dummy-fuse-csi") < 0 {
			t.Errorf("exit %d, calls %q: want the cluster deleted", code, calls)
		}
	})
	t.Run("no kind", func(t *testing.T) {
		s := newStubs(t, nil)
		code, stderr, _ := s.run(t, "kind-down.sh", "KIND=/nonexistent/kind")
		if code != 1 || !strings.Contains(stderr, "kind (/nonexistent/kind)") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
}
