package keeper

import (
	"errors"
	"fmt"
	"testing"
)

// TestLogLine reads back the lines the keeper writes, with the header its logf puts before them.
func TestLogLine(t *testing.T) {
	header := "2026-11-25T10:00:00.123456789Z csi-plugin keeper: "
	for _, tc := range []struct {
		line string
		want LogEvent
	}{
		{fmt.Sprintf(fmtConnected, 2), LogEvent{Kind: LogConnected}},
		{fmt.Sprintf(fmtServed, "vol-1", "v1.2.3-next", 42), LogEvent{Kind: LogServed, Volume: "vol-1", Version: "v1.2.3-next", PID: 42}},
		{fmt.Sprintf(fmtExited, 42, errors.New("signal: killed"), "vol-1, vol-2"), LogEvent{Kind: LogServerExited, PID: 42, Reason: "signal: killed"}},
		{"volume vol-1: its server pid 42 stopped serving it: unmounted", LogEvent{}},
		{"", LogEvent{}},
	} {
		if got := LogLine([]byte(header + tc.line)); got != tc.want {
			t.Errorf("LogLine(%q) = %+v, want %+v", tc.line, got, tc.want)
		}
	}
}
