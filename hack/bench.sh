#!/usr/bin/env bash
# Benchmarks dummy-fuse side by side with a C reference of the same filesystem (dummy-fuse/bench/cref, on
# libfuse3's multi-threaded loop), through real mounts (root + /dev/fuse). ROUNDS rounds; each round runs every
# benchmark of dummy-fuse/bench_test.go against both servers back to back, the order swapped every round. The
# machine is shared, so absolute numbers drift between rounds: the ratio Go/C within a round is the figure
# that holds. Numbers only; nothing is asserted.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-$PWD/bin}
ROUNDS=${ROUNDS:-5}
BENCHTIME=${BENCHTIME:-2s}
BENCH=${BENCH:-.}
# `make bench` has just built it; when run directly, rebuild a missing or stale binary.
if [ ! -x "$BIN/dummy-fuse" ] || [ -n "$(find dummy-fuse internal go.mod -newer "$BIN/dummy-fuse" -name '*.go' -o -newer "$BIN/dummy-fuse" -name go.mod | head -1)" ]; then
  hack/build.sh
fi

# The C reference: Debian's libfuse3 (installed when missing), gcc and pkg-config.
if ! pkg-config --exists fuse3 2>/dev/null || ! command -v gcc >/dev/null; then
  echo "installing libfuse3-dev, gcc, pkg-config for the C reference"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfuse3-dev gcc pkg-config >/dev/null
fi
cref="$BIN/dummy-fuse-cref"
# shellcheck disable=SC2046 # pkg-config prints several words on purpose
gcc -O2 -Wall -o "$cref" dummy-fuse/bench/cref/hello.c $(pkg-config --cflags --libs fuse3)

out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "dummy-fuse $("$BIN/dummy-fuse" --version) vs C libfuse3 $(pkg-config --modversion fuse3); $ROUNDS rounds x $BENCHTIME; load average $(cut -d' ' -f1-3 /proc/loadavg)"
go test -c -o "$out.test" ./dummy-fuse/
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) = 1 ]; then order="go=$BIN/dummy-fuse,c=$cref"; else order="c=$cref,go=$BIN/dummy-fuse"; fi
  echo "round $round ($order)" >&2
  (cd dummy-fuse && BENCH_SERVERS=$order "$out.test" -test.run '^$' -test.bench "$BENCH" -test.benchtime "$BENCHTIME") 2>&1 |
    grep -v '^Ignoring invalid max threads' | sed "s/^/round=$round /" | tee -a "$out" >&2
done
rm -f "$out.test"

# Lines look like: round=1 BenchmarkDirectIORead/go-2  40000  25000 ns/op  14.7 p50-µs  130 p99-µs  6.1 peak-RSS-MiB  40353 reads/s  17 server-cpu-µs/op
# (a libfuse warning may split a line: the numbers then follow on the next line)
awk '
  function median(list,    n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n == 0 ? "" : (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2)
  }
  /^round=[0-9]+ Benchmark/ {
    round = substr($1, 7); split($2, p, "/"); name = substr(p[1], 10); srv = p[2]; sub(/-[0-9]+$/, "", srv)
    if (!(name in seen)) { seen[name] = 1; order[++nb] = name }
    for (i = 4; i < NF; i += 2) v[name, srv, round, $(i + 1)] = $i
    rounds[round] = 1
  }
  END {
    if (nb == 0) { print "no benchmark results (not root, or no /dev/fuse?)"; exit 1 }
    for (k = 1; k <= nb; k++) {
      name = order[k]
      printf "\n%s\n  %-5s %12s %12s %7s   %9s %9s   %9s %9s   %8s %8s\n", name, "round", "Go reads/s", "C reads/s", "Go/C", "Go cpu/op", "C cpu/op", "Go p99", "C p99", "Go RSS", "C RSS"
      ratios = ""; gcpu = ""; ccpu = ""; grss = ""; crss = ""
      for (r = 1; (r in rounds); r++) {
        g = v[name, "go", r, "reads/s"]; c = v[name, "c", r, "reads/s"]
        if (g == "" || c == "") continue
        ratio = g / c; ratios = ratios " " ratio
        gcpu = gcpu " " v[name, "go", r, "server-cpu-µs/op"]; ccpu = ccpu " " v[name, "c", r, "server-cpu-µs/op"]
        grss = grss " " v[name, "go", r, "peak-RSS-MiB"]; crss = crss " " v[name, "c", r, "peak-RSS-MiB"]
        printf "  %-5d %12.0f %12.0f %7.2f   %7.1fµs %7.1fµs   %7.0fµs %7.0fµs   %5.1fMiB %5.1fMiB\n", r, g, c, ratio,
          v[name, "go", r, "server-cpu-µs/op"], v[name, "c", r, "server-cpu-µs/op"], v[name, "go", r, "p99-µs"], v[name, "c", r, "p99-µs"],
          v[name, "go", r, "peak-RSS-MiB"], v[name, "c", r, "peak-RSS-MiB"]
      }
      printf "  median Go/C %.2f; server CPU/op median Go %.1f µs, C %.1f µs; peak RSS median Go %.1f MiB, C %.1f MiB\n",
        median(ratios), median(gcpu), median(ccpu), median(grss), median(crss)
    }
    print "\ngoals: Go/C >= 1.0 for DirectIORead and OpenReadClose with no more CPU/op; SlowRead >= 1,440 reads/s (90% of 16 / 10 ms); peak RSS <= 4 MiB"
  }' "$out"
