package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/remediate"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
)

// TestUsageErrors: the remediator refuses bad flags with exit code 2 before it dials anything.
func TestUsageErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	streams := command.Streams{In: strings.NewReader(""), Out: &stdout, Err: &stderr}
	for _, args := range [][]string{
		{},                // no --node-name, neither --state-dir nor --driver
		{"--node-name=n"}, // nothing to look after
		{"--node-name=n", "--driver="},
		{"--node-name=n", "--driver=s3.csi.example.com", "--driver=s3.csi.example.com"},
		{"--node-name=n", "--state-dir=/s", "--restore-strategy=glue"},
		{"--node-name=n", "--state-dir=/s", "--interval=0s"},
		{"--node-name=n", "--state-dir=/s", "extra-argument"},
		{"--no-such-flag"},
	} {
		stderr.Reset()
		if code := command.Code("csi-remediate", remediate.Command(context.Background(), args, streams), &stderr); code != 2 {
			t.Errorf("csi-remediate %q = %d, want 2 (stderr: %s)", args, code, stderr.String())
		}
	}
}
