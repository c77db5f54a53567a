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
		{"volume vol-1: its server pid 42 stopped serving it: unmounted", KeeperLine{}},
		{"", KeeperLine{}},
	} {
		if got := ParseKeeperLine([]byte(header + tc.line)); got != tc.want {
			t.Errorf("ParseKeeperLine(%q) = %+v, want %+v", tc.line, got, tc.want)
		}
	}
}
