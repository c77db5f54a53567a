package local

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// A process is signalled and awaited through a pidfd (pidfd_open(2)): the PID cannot be reused by another
// process between finding it and signalling it.

func pidfdOpen(pid int) (int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	return fd, nil
}

func pidfdKill(fd int) error { return unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) }

// waitPidfd waits until the process of fd has exited (its pidfd polls readable), at most timeout.
func waitPidfd(ctx context.Context, fd int, timeout time.Duration) error {
	// The poll itself waits up to 20ms: the wait needs no interval of its own.
	return scenarios.Await(ctx, timeout, 0, "the process to exit", func() (bool, error) {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 20)
		if err != nil && err != unix.EINTR {
			return true, fmt.Errorf("poll pidfd: %w", err)
		}
		return n > 0, nil
	})
}
