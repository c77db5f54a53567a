package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Usage is what the threads of a process have used so far. CPU and context switches per operation hardly
// depend on what else runs on the machine, unlike operations per second.
type Usage struct {
	CPU      time.Duration // on a CPU (schedstat)
	Switches int64         // context switches, voluntary (blocking in read(2), futex) and not (preempted)
}

// Sub returns u − v.
func (u Usage) Sub(v Usage) Usage { return Usage{u.CPU - v.CPU, u.Switches - v.Switches} }

// UsageOf sums the usage of all threads of process pid (threads that exited are not counted, which is fine:
// the servers keep theirs).
func UsageOf(pid int) (Usage, error) {
	tasks, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*")
	if err != nil || len(tasks) == 0 {
		return Usage{}, fmt.Errorf("no threads for pid %d: %v", pid, err)
	}
	var u Usage
	for _, dir := range tasks {
		data, err := os.ReadFile(dir + "/schedstat")
		if err != nil {
			continue // thread exited
		}
		ns, err := strconv.ParseInt(strings.Fields(string(data))[0], 10, 64)
		if err != nil {
			return Usage{}, fmt.Errorf("%s/schedstat: %w", dir, err)
		}
		u.CPU += time.Duration(ns)
		for _, key := range []string{"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"} {
			n, err := StatusField(dir+"/status", key)
			if err != nil {
				return Usage{}, err
			}
			u.Switches += int64(n)
		}
	}
	return u, nil
}

// StatusField returns the number after key in a /proc status file (0 when the file is gone: the thread or
// process exited).
func StatusField(path, key string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, nil
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, key); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				return 0, fmt.Errorf("%s: %s %w", path, key, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s: no %s", path, key)
}
