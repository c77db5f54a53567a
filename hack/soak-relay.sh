#!/usr/bin/env bash
# The relay's soak run (needs root, /dev/fuse and the real servers of `make servers`): DFC_SOAK_KILLS (default
# 50) SIGKILLs of gcsfuse (against a fake GCS) and of squashfuse, each started again at once, under three
# readers through the relay (an O_DIRECT descriptor kept open, an open per read, a stat loop), every answer
# checked. Fails on any failed read or leftover descriptor, mount or process (dummy-fuse/relayfs/soak_test.go);
# the record goes to dummy-fuse/bench/results/soak, from which dummy-fuse/README.md's soak table is generated.
# OUT= (empty) writes none.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

OUT=${OUT-$PWD/dummy-fuse/bench/results/soak}
echo "kernel $(uname -r), load average $(cut -d" " -f1-3 /proc/loadavg)"
DFC_SOAK_KILLS=${DFC_SOAK_KILLS:-50} DFC_SOAK_OUT=$OUT DFC_SOAK_COMMIT=$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown) \
  go test -count=1 -run '^TestRelaySoak$' -timeout 30m -v ./dummy-fuse/relayfs/ | grep -vE '^=== RUN'
if [ -n "$OUT" ]; then
  go run ./dummy-fuse/bench/cmd/benchdoc
  echo "dummy-fuse/README.md: generated tables regenerated from the newest result files"
fi
