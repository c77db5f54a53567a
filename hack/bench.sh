#!/usr/bin/env bash
# Benchmarks dummy-fuse side by side with a C reference of the same filesystem (dummy-fuse/bench/cref, on
# libfuse3's multi-threaded loop), through real mounts (root + /dev/fuse). ROUNDS rounds; each round runs every
# benchmark of dummy-fuse/bench_test.go against both servers back to back, the order swapped every round. The
# machine is shared, so absolute numbers drift between rounds: the ratio Go/C within a round is the figure
# that holds. Numbers only; nothing is asserted. The machine, its load and every round are printed and recorded.
# LOAD=1 runs a CPU-bound thread per core beside the benchmarks (a busy node) and records into results/loaded.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-$PWD/bin}
ROUNDS=${ROUNDS:-5}
BENCHTIME=${BENCHTIME:-2s}
BENCH=${BENCH:-.}
LOAD=${LOAD:-0}
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

# The rounds, the machine, its load and every figure go to a result file in dummy-fuse/bench/results, from which
# dummy-fuse/README.md's table is generated (make bench-doc). OUT= (empty) writes none.
OUT=${OUT-dummy-fuse/bench/results}
loaded=()
if [ "$LOAD" = 1 ]; then
  loaded=(-loaded)
  OUT=${OUT:+$OUT/loaded}
fi
testbin=$(mktemp)
trap 'rm -f "$testbin"' EXIT
go test -c -o "$testbin" ./dummy-fuse/
commit=$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)
go run ./dummy-fuse/bench/cmd/benchrun -test-binary "$testbin" -dir dummy-fuse -go "$BIN/dummy-fuse" -c "$cref" \
  -libfuse "$(pkg-config --modversion fuse3)" -commit "$commit" -rounds "$ROUNDS" -benchtime "$BENCHTIME" -bench "$BENCH" -out "$OUT" "${loaded[@]}"
if [ -n "$OUT" ]; then
  go run ./dummy-fuse/bench/cmd/benchdoc
  echo "dummy-fuse/README.md: bench table regenerated from the newest result file"
fi
