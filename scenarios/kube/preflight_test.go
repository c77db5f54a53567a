package kube

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeKubeconfig writes a kubeconfig for the cluster at server into dir and returns its path.
func writeKubeconfig(t *testing.T, dir, server string) string {
	t.Helper()
	p := filepath.Join(dir, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: %s
users:
- name: u
  user:
    token: t
contexts:
- name: x
  context:
    cluster: c
    user: u
current-context: x
`, server)
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// noCluster is a machine without ~/.kube/config and outside any pod.
func noCluster(t *testing.T) PreflightEnv {
	return PreflightEnv{HomeKubeconfig: filepath.Join(t.TempDir(), "config"), InCluster: func() bool { return false }, Timeout: 2 * time.Second}
}

// TestPreflightKubeconfig: a KUBECONFIG (or --kubeconfig) naming a missing file, or no configuration at all,
// stops the run with what to do; client-go would have fallen back to localhost:8080 in silence.
func TestPreflightKubeconfig(t *testing.T) {
	clusterDir := t.TempDir()
	t.Setenv("DFC_CLUSTER_DIR", clusterDir)
	made := filepath.Join(clusterDir, "kubeconfig")
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope", "kubeconfig")
	present := writeKubeconfig(t, dir, "https://127.0.0.1:6443")
	opts := Options{Repo: "/nonexistent", Image: "x:y"}
	cases := []struct {
		name       string
		kubeconfig string // $KUBECONFIG
		flag       string // --kubeconfig
		env        PreflightEnv
		want       string // "": no complaint about the kubeconfig
	}{
		{name: "missing", kubeconfig: missing, env: noCluster(t),
			want: "KUBECONFIG names " + missing + ", which does not exist: point it at your cluster's kubeconfig (make cluster-up writes " + made + ")"},
		{name: "one of a list missing", kubeconfig: present + string(os.PathListSeparator) + missing, env: noCluster(t),
			want: "KUBECONFIG names " + missing + ", which does not exist"},
		{name: "empty entries", kubeconfig: string(os.PathListSeparator) + present, env: noCluster(t)},
		{name: "flag missing", kubeconfig: present, flag: missing, env: noCluster(t), want: "--kubeconfig names " + missing + ", which does not exist"},
		{name: "flag present", kubeconfig: missing, flag: present, env: noCluster(t)},
		{name: "in a pod", env: PreflightEnv{HomeKubeconfig: missing, InCluster: func() bool { return true }}},
		{name: "home config", env: PreflightEnv{HomeKubeconfig: present, InCluster: func() bool { return false }}},
	}
	for _, tc := range cases {
		t.Setenv("KUBECONFIG", tc.kubeconfig)
		o := opts
		o.Kubeconfig = tc.flag
		err := kubeconfigExists(o, tc.env)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: error of more than one line: %q", tc.name, err)
		}
	}
	// Nothing configured: how to get a cluster, or, when make cluster-up made one, how to use it.
	t.Setenv("KUBECONFIG", "")
	env := noCluster(t)
	err := kubeconfigExists(opts, env)
	for _, want := range []string{"no cluster is configured (KUBECONFIG is unset, " + env.HomeKubeconfig + " does not exist, and this is not a pod of a cluster)", "make cluster-up", "export KUBECONFIG=" + made, "make kind-up"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("nothing configured: %v, want %q in it", err, want)
		}
	}
	writeKubeconfig(t, clusterDir, "https://127.0.0.1:6443")
	if err := kubeconfigExists(opts, env); err == nil || !strings.HasSuffix(err.Error(), "the from-source cluster's kubeconfig is there, export KUBECONFIG="+made) {
		t.Errorf("nothing configured, a from-source cluster's kubeconfig there: %v", err)
	}
	// Preflight itself stops at the missing file, before any call.
	t.Setenv("KUBECONFIG", missing)
	if err := Preflight(context.Background(), opts, noCluster(t)); err == nil || !strings.HasPrefix(err.Error(), "KUBECONFIG names "+missing) {
		t.Errorf("Preflight with a missing KUBECONFIG: %v", err)
	}
}

// TestPreflightAnswers: a configured cluster that is down, hangs or refuses the credentials is one line that
// names its host, within the timeout; one that answers passes.
func TestPreflightAnswers(t *testing.T) {
	hang := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer hanging.Close()
	defer close(hang)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"major":"1","minor":"37","gitVersion":"v1.37.2"}`)
	}))
	defer up.Close()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`)
	}))
	defer refusing.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close() // nothing listens there any more: connection refused

	t.Setenv("KUBECONFIG", "")
	env := noCluster(t)
	env.Timeout = 300 * time.Millisecond
	cases := []struct {
		server string
		want   string // "": it answers
	}{
		{server: up.URL},
		{server: down, want: "the cluster at " + down + " does not answer (dial tcp " + l.Addr().String() + ": connect: connection refused): is it up? (make cluster-up)"},
		{server: hanging.URL, want: "the cluster at " + hanging.URL + " does not answer (no answer within 300ms): is it up? (make cluster-up)"},
		{server: refusing.URL, want: "the cluster at " + refusing.URL + " refuses the kubeconfig's credentials"},
	}
	for _, tc := range cases {
		opts := Options{Repo: "/nonexistent", Image: "x:y", Kubeconfig: writeKubeconfig(t, t.TempDir(), tc.server)}
		start := time.Now()
		err := Preflight(context.Background(), opts, env)
		if took := time.Since(start); took > 5*env.Timeout {
			t.Errorf("%s: took %s, more than the timeout %s allows", tc.server, took, env.Timeout)
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.server, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.server, err, tc.want)
		}
	}
	// A cluster that answers, but no image to run on it: said before any scenario, not in each one's setup.
	repo := t.TempDir()
	opts := Options{Repo: repo, Kubeconfig: writeKubeconfig(t, t.TempDir(), up.URL)}
	if err := Preflight(context.Background(), opts, env); err == nil || !strings.Contains(err.Error(), "run make image") {
		t.Errorf("no image ref: %v, want the hint to run make image", err)
	}
	// A context the kubeconfig does not have.
	opts = Options{Repo: "/nonexistent", Image: "x:y", Kubeconfig: writeKubeconfig(t, t.TempDir(), up.URL), Context: "nope"}
	if err := Preflight(context.Background(), opts, env); err == nil || !strings.Contains(err.Error(), `context "nope"`) {
		t.Errorf("unknown context: %v", err)
	}
}
