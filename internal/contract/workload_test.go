package contract

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

func TestErrnoName(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{syscall.ENOTCONN, "ENOTCONN"},
		{syscall.ECONNABORTED, "ECONNABORTED"},
		{&fs.PathError{Op: "read", Path: "x", Err: syscall.ENOENT}, "ENOENT"},
		{fmt.Errorf("wrapped: %w", &fs.PathError{Op: "open", Path: "x", Err: syscall.EIO}), "EIO"},
		{syscall.EROFS, "EROFS"},
		{errors.New("no errno"), ""},
		{syscall.Errno(4000), "errno 4000"},
	} {
		if got := ErrnoName(tc.err); got != tc.want {
			t.Errorf("ErrnoName(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
