package kube

import (
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// errnoTexts maps the strerror text of every errno ("transport endpoint is not connected") to its name
// ("ENOTCONN"): kubelet and containerd report a cause only as text, inside an event message or a log line.
var errnoTexts = func() map[string]string {
	m := map[string]string{}
	for e := syscall.Errno(1); e < 200; e++ {
		if name := unix.ErrnoName(e); name != "" {
			m[e.Error()] = name
		}
	}
	return m
}()

// errnoIn returns the name of the errno whose text occurs last in msg (the innermost cause of a wrapped
// error comes last), or "" when msg names none.
func errnoIn(msg string) string {
	best, bestText, at := "", "", -1
	for text, name := range errnoTexts {
		// At the same position the longer text is the more specific one.
		if i := strings.LastIndex(msg, text); i >= 0 && (i > at || (i == at && len(text) > len(bestText))) {
			best, bestText, at = name, text, i
		}
	}
	return best
}
