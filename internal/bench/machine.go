package bench

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ThisMachine describes the machine the process runs on.
func ThisMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), CPU: "unknown"}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	return m
}

// MeasureLoad reads the load averages and the share of non-idle CPU time over the next interval.
func MeasureLoad(interval time.Duration) (Load, error) {
	var l Load
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l, err
	}
	f := strings.Fields(string(b))
	for i := range l.Avg {
		if i < len(f) {
			l.Avg[i], _ = strconv.ParseFloat(f[i], 64)
		}
	}
	idle0, total0, err := cpuTimes()
	if err != nil {
		return l, err
	}
	time.Sleep(interval)
	idle1, total1, err := cpuTimes()
	if err != nil {
		return l, err
	}
	if total1 > total0 {
		l.Busy = 1 - float64(idle1-idle0)/float64(total1-total0)
	}
	return l, nil
}

// cpuTimes returns the idle (idle + iowait) and total jiffies of all CPUs from /proc/stat.
func cpuTimes() (idle, total uint64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return idle, total, nil
}

func (l Load) String() string {
	return fmt.Sprintf("load average %.2f %.2f %.2f, CPU %.0f%% busy", l.Avg[0], l.Avg[1], l.Avg[2], 100*l.Busy)
}
