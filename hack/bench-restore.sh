#!/usr/bin/env bash
# Restore cost of csi-plugin as volumes grow (needs root + /dev/fuse): with 1, 100 and 500 volumes staged and
# published (one dummy-fuse each), kill -9 the plugin so every mount is dead, restart it with --restore-mounts and
# time start -> Probe ready; then the RSS/PSS of the plugin and its FUSE servers. BENCHTIME=3x repeats each.
# BENCH=BenchmarkKeeperRestart (make bench-keeper) does the same in keeper mode, where nothing dies with the
# plugin: the restart finds every mount answering, and the memory is that of plugin, keeper and servers.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

echo "load average $(cut -d" " -f1-3 /proc/loadavg) (other builds share the machine: numbers are noisy)"
go test -run '^$' -bench "${BENCH:-BenchmarkRestore}" -benchtime "${BENCHTIME:-1x}" -timeout 30m -v ./csi-plugin/ |
  grep -E '^(Benchmark|ok|FAIL|PASS)|volumes: start|--- FAIL|Error'
