#!/usr/bin/env bash
# The keeper placement's soak run (needs root + /dev/fuse): DFC_SOAK_KILLS (default 50) kills of one component
# at random (a FUSE server, the keeper, the plugin) under ten workloads reading without pause, page cache and
# O_DIRECT, a descriptor kept open and an open per read. Fails on any failed read or leftover; prints the cost
# of each kill (csi-plugin/keeper_soak_test.go).
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

echo "kernel $(uname -r), load average $(cut -d" " -f1-3 /proc/loadavg)"
DFC_SOAK_KILLS=${DFC_SOAK_KILLS:-50} go test -count=1 -run '^TestKeeperSoak$' -timeout 30m -v ./csi-plugin/ |
  grep -vE '^=== RUN'
