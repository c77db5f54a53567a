package kube

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
)

// keeper-double-fault needs the two servers `keeper crash --successor` killed: from its output, or, when the
// exec stream came back empty although the command ran, from the exits the keeper's log names after the exec.
func TestSuccessorKills(t *testing.T) {
	ctx := context.Background()
	b := &Backend{}
	b.keeper = &keeperPart{b: b}
	b.keeper.exited.pids = []int{7} // an exit before the exec: not one of its kills

	got, err := b.successorKills(ctx, fmt.Sprintf(contract.KeeperCrashSuccessorFormat, 15, "vol-1", 24), 1, time.Second)
	if err != nil || got != [2]int{15, 24} {
		t.Errorf("from the output: %v, %v; want [15 24]", got, err)
	}

	go func() {
		time.Sleep(50 * time.Millisecond)
		b.keeper.exited.Lock()
		b.keeper.exited.pids = append(b.keeper.exited.pids, 15, 24)
		b.keeper.exited.Unlock()
	}()
	got, err = b.successorKills(ctx, "", 1, 5*time.Second)
	if err != nil || got != [2]int{15, 24} {
		t.Errorf("empty output, two exits logged after the exec: %v, %v; want [15 24]", got, err)
	}

	b.keeper.exited.pids = []int{7, 15}
	_, err = b.successorKills(ctx, "", 1, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "named 1 exits") {
		t.Errorf("empty output, one exit logged: %v; want an error naming what it waited for", err)
	}
}
