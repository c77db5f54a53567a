package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
)

func TestParseDriver(t *testing.T) {
	base := []string{"--backend=kube", "--driver=x.example.com", "--storage-class=fast", "--read-path=data/a.txt"}
	with := func(more ...string) []string { return append(append([]string{}, base...), more...) }
	cases := []struct {
		args  []string
		code  int // -1: parses and runs
		names string
		out   string
	}{
		{args: with("all"), code: -1, names: "driver-pod-delete,driver-rollout,driver-remediate", out: ""},
		{args: with("--fuse-process=gcsfuse", "--mount-pod-selector=app=mnt", "all"), code: -1,
			names: "driver-pod-delete,driver-rollout,driver-process-kill,driver-mount-pod-delete,driver-remediate"},
		{args: with("driver-process-kill"), code: 2, out: "driver-process-kill needs --fuse-process=NAME"},
		{args: with("driver-mount-pod-delete"), code: 2, out: "needs --mount-pod-selector"},
		{args: with("restart"), code: 2, out: `no driver-agnostic scenario "restart"`},
		{args: []string{"--driver=x", "--storage-class=a", "--read-path=f", "driver-rollout"}, code: 2, out: "needs --backend=kube"},
		{args: []string{"--backend=kube", "--storage-class=a", "restart"}, code: 2, out: "--storage-class goes with --driver"},
		{args: []string{"--backend=kube", "--driver=x", "--read-path=f", "driver-rollout"}, code: 2, out: "exactly one of --storage-class, --pv and --volume-attributes"},
		{args: with("--pv=pv.yaml", "driver-rollout"), code: 2, out: "exactly one of"},
		{args: []string{"--backend=kube", "--driver=x", "--volume-attributes=a=1,b", "--read-path=f", "driver-rollout"}, code: 2, out: `"b" is not key=value`},
		{args: []string{"--backend=kube", "--driver=x", "--volume-attributes=a=1,a=2", "--read-path=f", "driver-rollout"}, code: 2, out: `key "a" given twice`},
		{args: []string{"--backend=kube", "--driver=x", "--storage-class=a", "--check", "driver-rollout"}, code: 0}, // read path found on the node
		{args: []string{"--backend=kube", "--driver=x", "--storage-class=a", "--read-path=../etc/passwd", "driver-rollout"}, code: 2, out: "inside it"},
		{args: []string{"--backend=kube", "--driver=x", "--storage-class=a", "--read-path=/f", "driver-rollout"}, code: 2, out: "relative"},
		{args: with("--plugin-selector=a in (", "driver-rollout"), code: 2, out: "--plugin-selector"},
		{args: with("--fuse-process=a/b", "driver-process-kill"), code: 2, out: "--fuse-process"},
		{args: with("--fuse-server=gcsfuse", "driver-rollout"), code: 2, out: "--fuse-server configures this project's chart"},
		{args: with("--kube-set=a=1", "driver-rollout"), code: 2, out: "--kube-set configures"},
		{args: with("--check", "driver-rollout"), code: 0},
		{args: []string{"--list"}, code: 0, out: "driver-rollout"},
		{args: []string{"--backend=kube", "--placement=keeper", "restart"}, code: 2, out: "--placement goes with --driver"},
	}
	for _, tc := range cases {
		var stdout, stderr bytes.Buffer
		if tc.code >= 0 {
			err := run(context.Background(), tc.args, command.Streams{Out: &stdout, Err: &stderr}, okMachine())
			if code := command.Code("dfc-scenario", err, &stderr); code != tc.code {
				t.Errorf("%q: exit code %d, want %d (stderr %s)", tc.args, code, tc.code, stderr.String())
			}
			if !strings.Contains(stdout.String()+stderr.String(), tc.out) {
				t.Errorf("%q: output lacks %q:\n%s%s", tc.args, tc.out, stdout.String(), stderr.String())
			}
			continue
		}
		cfg, err := parse(tc.args, &stdout)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		var names []string
		for _, sc := range cfg.scenarios {
			names = append(names, sc.Name)
			if !sc.Measured || sc.Driver != "x.example.com" {
				t.Errorf("%q: %s is not a measured row of the driver (Measured %t, Driver %q)", tc.args, sc.Name, sc.Measured, sc.Driver)
			}
		}
		if strings.Join(names, ",") != tc.names {
			t.Errorf("%q: scenarios %v, want %s", tc.args, names, tc.names)
		}
		if cfg.kube.Driver == nil || cfg.kube.Driver.StorageClass != "fast" || cfg.kube.Driver.ReadPath != "data/a.txt" {
			t.Errorf("%q: the backend's driver target is %+v", tc.args, cfg.kube.Driver)
		}
	}
}
