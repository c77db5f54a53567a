#!/usr/bin/env bash
# The relay's soak runs (need root, /dev/fuse and the real servers of `make servers`). By default the relay mode's
# (make soak-relay): DFC_SOAK_KILLS (default 50) SIGKILLs of gcsfuse (against a fake GCS) and of squashfuse, each
# started again at once, under three readers through the relay (an O_DIRECT descriptor kept open, an open per
# read, a stat loop), every answer checked; fails on any failed read or leftover descriptor, mount or process
# (dummy-fuse/relayfs/soak_test.go); the record goes to dummy-fuse/bench/results/soak, from which
# dummy-fuse/README.md's soak table is generated. SOAK=relay-keeper (make soak-relay-keeper) runs the relay-keeper
# mode's instead (csi-plugin/relay_keeper_soak_test.go: kills of the real server, the relay, the keeper and the
# plugin), recorded in results/soak-relay-keeper for csi-plugin/README.md. SOAK=relay-write (make soak-relay-write)
# kills gcsfuse and s3fs behind the writable relay under dummy-fuse-workload --write and checks the storage
# against the writer's log (dummy-fuse/relayfs/write_soak_test.go; needs rclone's fake S3 and Debian's s3fs),
# recorded in results/soak-relay-write. OUT= (empty) writes none.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

case ${SOAK:-relay} in
relay) test=TestRelaySoak pkg=./dummy-fuse/relayfs/ results=soak ;;
relay-keeper) test=TestRelayKeeperSoak pkg=./csi-plugin/ results=soak-relay-keeper ;;
relay-write) test=TestRelayWriteSoak pkg=./dummy-fuse/relayfs/ results=soak-relay-write ;;
*) echo "SOAK=$SOAK: want relay, relay-keeper or relay-write" >&2; exit 2 ;;
esac
OUT=${OUT-$PWD/dummy-fuse/bench/results/$results}
echo "kernel $(uname -r), load average $(cut -d" " -f1-3 /proc/loadavg)"
DFC_SOAK_KILLS=${DFC_SOAK_KILLS:-50} DFC_SOAK_OUT=$OUT DFC_SOAK_COMMIT=$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown) \
  go test -count=1 -run "^$test\$" -timeout 60m -v "$pkg" | grep -vE '^=== RUN'
echo "load average at the end $(cut -d" " -f1-3 /proc/loadavg)"
if [ -n "$OUT" ]; then
  go run ./dummy-fuse/bench/cmd/benchdoc
  echo "dummy-fuse/README.md, csi-plugin/README.md: generated tables regenerated from the newest result files"
fi
