package contract

import (
	"errors"
	"fmt"
	"testing"
)

// TestParseKeeperLine reads back the lines the keeper writes, with the header its logf puts before them.
func TestParseKeeperLine(t *testing.T) {
	header := "2026-11-25T10:00:00.123456789Z csi-plugin keeper: "
	for _, tc := range []struct {
		line string
		want KeeperLine
	}{
		{fmt.Sprintf(KeeperConnectedFormat, 2), KeeperLine{Kind: KeeperLineConnected}},
		{fmt.Sprintf(KeeperServedFormat, "vol-1", "v1.2.3-next", 42), KeeperLine{Kind: KeeperLineServed, Volume: "vol-1", Version: "v1.2.3-next", PID: 42}},
		{fmt.Sprintf(KeeperExitedFormat, 42, errors.New("signal: killed"), "vol-1, vol-2"), KeeperLine{Kind: KeeperLineServerExited, PID: 42, Reason: "signal: killed"}},
		{fmt.Sprintf(KeeperRealServerFormat, "vol-1", 43, "/usr/local/bin/gcsfuse --foreground bucket /dev/fd/3"), KeeperLine{Kind: KeeperLineRealServer, Volume: "vol-1", PID: 43, Reason: "/usr/local/bin/gcsfuse --foreground bucket /dev/fd/3"}},
		{fmt.Sprintf(KeeperRealServerExitedFormat, "vol-1", 43, errors.New("signal: killed")), KeeperLine{Kind: KeeperLineRealServerExited, Volume: "vol-1", PID: 43, Reason: "signal: killed"}},
		{"volume vol-1: its server pid 42 stopped serving it: unmounted", KeeperLine{}},
		{"", KeeperLine{}},
	} {
		if got := ParseKeeperLine([]byte(header + tc.line)); got != tc.want {
			t.Errorf("ParseKeeperLine(%q) = %+v, want %+v", tc.line, got, tc.want)
		}
	}
}

func TestParseCrashSuccessor(t *testing.T) {
	first, next, ok := ParseCrashSuccessor(fmt.Sprintf(KeeperCrashSuccessorFormat, 15, "vol-1", 24) + "\n")
	if !ok || first != 15 || next != 24 {
		t.Errorf("ParseCrashSuccessor = %d, %d, %t; want 15, 24, true", first, next, ok)
	}
	if _, _, ok := ParseCrashSuccessor("SIGKILL sent to FUSE server pid 15 of volume vol-1"); ok {
		t.Error("a single kill's output parsed as a successor's")
	}
}
