#!/usr/bin/env bash
# The relay's cost (needs root, /dev/fuse and the real servers of `make servers`): gcsfuse (against a fake GCS)
# and squashfuse, each read directly and through a relay (dummy-fuse --relay-backend) in front of the same
# mount, back to back, the order swapped every round: reads/s and p50/p99 for direct-I/O reads, open+read+close
# and cached reads. Then, per round, KILLS server kills under a reader through the relay: the server's own start
# time against the reader's stall. ROUNDS rounds; the ratio relay/direct within a round is the figure that holds
# on a shared machine. Numbers only; nothing is asserted (dummy-fuse/relayfs/bench_test.go).
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
BENCHTIME=${BENCHTIME:-2s}
KILLS=${KILLS:-5}
# The result file goes to dummy-fuse/bench/results/relay, from which dummy-fuse/README.md's relay table is
# generated (make bench-doc). OUT= (empty) writes none.
# KIND=write (make bench-relay-write) runs the writable relay's write benchmarks instead (gcsfuse and s3fs:
# a 1 MiB file written in 64 KiB writes and closed; a 64 KiB write and an fsync), recorded in results/relay-write.
KIND=${KIND:-read}
case $KIND in
read) results=relay writes= ;;
write) results=relay-write writes=-writes ;;
*) echo "KIND=$KIND: want read or write" >&2; exit 2 ;;
esac
OUT=${OUT-dummy-fuse/bench/results/$results}
testbin=$(mktemp)
trap 'rm -f "$testbin"' EXIT
go test -c -o "$testbin" ./dummy-fuse/relayfs/
commit=$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)
go run ./dummy-fuse/bench/cmd/benchrelay -test-binary "$testbin" -dir dummy-fuse/relayfs -commit "$commit" \
  -rounds "$ROUNDS" -benchtime "$BENCHTIME" -kills "$KILLS" -out "$OUT" $writes
if [ -n "$OUT" ]; then
  go run ./dummy-fuse/bench/cmd/benchdoc
  echo "dummy-fuse/README.md: generated tables regenerated from the newest result files"
fi
