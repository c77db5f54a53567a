package kube

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// kubeletLog follows kubelet's own log for the causes kubelet logs but keeps out of events: the cause
// behind "failed to prepare subPath for volumeMount" is only in kubelet's log ("Don't pass detailed error back
// to the user because it could give information about host filesystem", pkg/kubelet/kubelet_pods.go).
type kubeletLog struct {
	mu    sync.Mutex
	lines []kubeletLine
	used  map[int]bool
	ch    chan struct{}
	keep  func(string) bool // which lines concern this run
	out   *scenarios.LogFile
}

type kubeletLine struct {
	t         time.Time
	level     byte
	container string // containerName="..."
	err       string // err="..."
	raw       string
}

var (
	klogHeader  = regexp.MustCompile(`^([IWEF])(\d{4} \d{2}:\d{2}:\d{2}\.\d{6})\s`)
	klogErr     = regexp.MustCompile(`\berr="((?:[^"\\]|\\.)*)"`)
	klogCtrName = regexp.MustCompile(`\bcontainerName="([^"]*)"`)
)

func parseKubeletLine(raw string, now time.Time) kubeletLine {
	l := kubeletLine{raw: raw}
	if m := klogHeader.FindStringSubmatch(raw); m != nil {
		l.level = m[1][0]
		if t, err := time.ParseInLocation("0102 15:04:05.000000", m[2], time.Local); err == nil {
			l.t = t.AddDate(now.Year(), 0, 0)
		}
	}
	if m := klogErr.FindStringSubmatch(raw); m != nil {
		if s, err := strconv.Unquote(`"` + m[1] + `"`); err == nil {
			l.err = s
		} else {
			l.err = m[1]
		}
	}
	if m := klogCtrName.FindStringSubmatch(raw); m != nil {
		l.container = m[1]
	}
	return l
}

func (k *kubeletLog) add(raw string) {
	if !k.keep(raw) {
		return
	}
	l := parseKubeletLine(raw, time.Now())
	k.out.WriteLine("", []byte(raw))
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lines = append(k.lines, l)
	close(k.ch)
	k.ch = make(chan struct{})
}

// cause waits (at most 3 s) for kubelet's error line about container c of pod uid logged around t (a start
// failure's event time) and returns its err text. Each line explains one failure.
func (k *kubeletLog) cause(ctx context.Context, c, uid string, t time.Time) (string, bool) {
	deadline := time.NewTimer(3 * time.Second)
	defer deadline.Stop()
	for {
		k.mu.Lock()
		for i, l := range k.lines {
			if k.used[i] || l.level != 'E' || l.container != c || l.err == "" || !strings.Contains(l.raw, uid) {
				continue
			}
			if d := l.t.Sub(t); d > -5*time.Second && d < 2*time.Second {
				k.used[i] = true
				k.mu.Unlock()
				return l.err, true
			}
		}
		ch := k.ch
		k.mu.Unlock()
		select {
		case <-ctx.Done():
			return "", false
		case <-deadline.C:
			return "", false
		case <-ch:
		}
	}
}

// defaultKubeletLogFile is the from-source cluster's kubelet log (hack/cluster), when it exists.
func defaultKubeletLogFile() string {
	dir := clusterDir()
	if dir == "" {
		return ""
	}
	p := filepath.Join(dir, "logs", "kubelet.log")
	if fileExists(p) {
		return p
	}
	return ""
}

// kindKubeletLogCommand is the command that prints a kind node's kubelet log, when the node is a kind node
// (providerID kind://<provider>/<cluster>/<node>) and the provider's CLI is in $PATH.
func kindKubeletLogCommand(providerID string) []string {
	rest, ok := strings.CutPrefix(providerID, "kind://")
	if !ok {
		return nil
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return nil
	}
	cli := parts[0]
	if _, err := exec.LookPath(cli); err != nil {
		return nil
	}
	return []string{cli, "exec", parts[2], "journalctl", "-u", "kubelet", "-f", "-o", "cat", "-n", "0"}
}

// startKubeletLog starts following kubelet's log when a source is configured or found; without one, causes
// that only kubelet logs stay unknown (and checks that need them say so).
func (b *Backend) startKubeletLog(ctx context.Context) error {
	src, cmdArgs := b.opts.KubeletLog, b.opts.KubeletLogCommand
	if src == "-" {
		return nil
	}
	if src == "" && len(cmdArgs) == 0 {
		if node, err := b.cs.CoreV1().Nodes().Get(ctx, b.node, metav1.GetOptions{}); err == nil {
			cmdArgs = kindKubeletLogCommand(node.Spec.ProviderID)
		}
		if len(cmdArgs) == 0 {
			src = defaultKubeletLogFile()
		}
	}
	if src == "" && len(cmdArgs) == 0 {
		b.logf("kubelet log: none found (causes that kubelet only logs stay unknown)")
		return nil
	}
	var err error
	if b.logs.kubelet, err = b.env.Log("kubelet.log"); err != nil {
		return err
	}
	uid := b.workloadUID()
	ns := b.n.namespace
	k := &kubeletLog{used: map[int]bool{}, ch: make(chan struct{}), out: b.logs.kubelet,
		keep: func(l string) bool { return strings.Contains(l, uid) || strings.Contains(l, ns) }}
	b.watch.kubelet = k
	if src != "" {
		fh, err := os.Open(src)
		if err != nil {
			return fmt.Errorf("kubelet log: %w", err)
		}
		if _, err := fh.Seek(0, io.SeekEnd); err != nil {
			fh.Close()
			return err
		}
		b.logf("kubelet log: following %s", src)
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer fh.Close()
			scenarios.TailLines(fh, b.ctx.Done(), 200*time.Millisecond, func(l []byte) { k.add(string(l)) })
		}()
		return nil
	}
	cmd := exec.CommandContext(b.ctx, cmdArgs[0], cmdArgs[1:]...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kubelet log: %s: %w", strings.Join(cmdArgs, " "), err)
	}
	b.logf("kubelet log: following `%s` (pid %d)", strings.Join(cmdArgs, " "), cmd.Process.Pid)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		readLines(out, func(l []byte) { k.add(string(l)) })
		if err := cmd.Wait(); err != nil && b.ctx.Err() == nil {
			b.logf("kubelet log command ended: %v", err)
		}
	}()
	return nil
}
