package local

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
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
	deadline := time.Now().Add(timeout)
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 20)
		if err != nil && err != unix.EINTR {
			return fmt.Errorf("poll pidfd: %w", err)
		}
		if n > 0 {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the process did not exit within %s", timeout)
		}
	}
}
