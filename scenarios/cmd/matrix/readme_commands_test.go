package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// readmeCommands returns the commands of the README's first sh block (its quick start), comments dropped.
func readmeCommands(readme []byte) []string {
	var cmds []string
	in := false
	s := bufio.NewScanner(bytes.NewReader(readme))
	for s.Scan() {
		line := s.Text()
		switch {
		case !in && line == "```sh":
			in = true
		case in && line == "```":
			return cmds
		case in:
			if c, _, _ := strings.Cut(line, "#"); strings.TrimSpace(c) != "" {
				cmds = append(cmds, strings.TrimSpace(c))
			}
		}
	}
	return nil
}

// TestReadmeCommandsInOrder runs the README's quick start as a newcomer does, command after command from the
// repository's root, up to `make test` (this test runs inside it): each must succeed, and together they must
// change no tracked file, so that `make test` after them passes as before (it checks the docs generated from
// scenarios/results). `make scenarios` runs two rows here instead of the whole catalog (DFC_SCENARIOS), which
// make test runs on the local backend anyway (scenarios/local's TestScenarios).
func TestReadmeCommandsInOrder(t *testing.T) {
	testenv.RequireFUSE(t)
	readme, err := os.ReadFile(rootReadme)
	if err != nil {
		t.Fatal(err)
	}
	cmds := readmeCommands(readme)
	if len(cmds) < 3 || cmds[0] != "make scenario-restart" || cmds[len(cmds)-1] != "make test" || !slices.ContainsFunc(cmds, func(c string) bool { return strings.HasPrefix(c, "make scenarios") }) {
		t.Fatalf("the README's quick start is %q: want make scenario-restart first, make scenarios, and make test last", cmds)
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	before := trackedState(t, root)
	for _, c := range cmds[:len(cmds)-1] {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-c", c)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "DFC_SCENARIOS=restart relay-server-crash")
		cmd.WaitDelay = 10 * time.Second
		start := time.Now()
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("README command %q failed after %s: %v\n%s", c, time.Since(start).Round(time.Second), err, tailOf(out, 40))
		}
		t.Logf("%s: ok in %s", c, time.Since(start).Round(time.Second))
		if after := trackedState(t, root); after != before {
			t.Fatalf("README command %q changed tracked files, which breaks make test after it:\nbefore:\n%s\nafter:\n%s", c, before, after)
		}
	}
}

// trackedState is what git says of the tracked files: which differ from HEAD, and a digest of how (the diff), so
// that a change by a command shows even in a tree that was dirty before it.
func trackedState(t *testing.T, root string) string {
	t.Helper()
	status, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").CombinedOutput()
	if err != nil {
		t.Fatalf("git status: %v\n%s", err, status)
	}
	diff, err := exec.Command("git", "-C", root, "diff", "HEAD").Output()
	if err != nil {
		t.Fatalf("git diff HEAD: %v", err)
	}
	return fmt.Sprintf("%sdiff sha256 %x\n", status, sha256.Sum256(diff))
}

// tailOf returns the last n lines of out.
func tailOf(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
