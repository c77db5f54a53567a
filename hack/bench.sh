#!/usr/bin/env bash
# Benchmarks dummy-fuse through real mounts served by the dummy-fuse binary (root + /dev/fuse):
# reads/s and p50/p99 latency of (1) pread on an open file with --direct-io (every read reaches the server)
# and (2) open+read+close in page-cache mode, and the server's peak RSS (VmHWM) after the load.
# It runs the Go benchmarks COUNT times and prints best, median and range: other builds share the machine,
# so single runs are noisy. Numbers only; nothing is asserted.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-$PWD/bin}
COUNT=${COUNT:-5}
BENCHTIME=${BENCHTIME:-2s}
# `make bench` has just built it; when run directly, rebuild a missing or stale binary.
if [ ! -x "$BIN/dummy-fuse" ] || [ -n "$(find dummy-fuse internal go.mod -newer "$BIN/dummy-fuse" -name '*.go' -o -newer "$BIN/dummy-fuse" -name go.mod | head -1)" ]; then
  hack/build.sh
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "running benchmarks: $COUNT x $BENCHTIME each, server $BIN/dummy-fuse, load average $(cut -d' ' -f1-3 /proc/loadavg)"
DUMMY_FUSE_BIN="$BIN/dummy-fuse" go test -run '^$' -bench . -benchtime "$BENCHTIME" -count "$COUNT" ./dummy-fuse/ | tee "$out"

# Lines look like: BenchmarkDirectIORead-2  40000  25000 ns/op  14.7 p50-µs  130 p99-µs  6.1 peak-RSS-MiB  40353 reads/s  17 server-cpu-µs/op
awk '
  /^Benchmark/ {
    name = $1; sub(/-[0-9]+$/, "", name); sub(/^Benchmark/, "", name)
    if (!(name in seen)) { seen[name] = 1; order[++nb] = name }
    for (i = 5; i < NF; i += 2) { key = name SUBSEP $(i + 1); vals[key] = vals[key] " " $i }
  }
  function summary(name, unit, higher_is_better, target,    n, a, i, j, t, best, med) {
    n = split(vals[name SUBSEP unit], a, " ")
    if (n == 0) return
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    best = higher_is_better ? a[n] : a[1]
    med = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    printf "  %-17s best %9.1f   median %9.1f   range %.1f-%.1f   %s\n", unit, best, med, a[1], a[n], target
  }
  END {
    if (nb == 0) { print "no benchmark results (not root, or no /dev/fuse?)"; exit 1 }
    label["DirectIORead"] = "re-read of an open file, --direct-io (every pread is a FUSE READ)"
    label["OpenReadClose"] = "open+read+close, page cache (one FUSE OPEN per operation)"
    goal["DirectIORead"] = "(target >= 25000)"; goal["OpenReadClose"] = "(target >= 8000)"
    print "\nsummary over all runs:"
    for (k = 1; k <= nb; k++) {
      name = order[k]; print name ": " label[name]
      summary(name, "reads/s", 1, goal[name])
      summary(name, "p50-µs", 0, "")
      summary(name, "p99-µs", 0, "")
      summary(name, "peak-RSS-MiB", 0, "(target <= 12)")
      summary(name, "server-cpu-µs/op", 0, "(CPU of the dummy-fuse process per operation)")
    }
  }' "$out"
