#!/usr/bin/env bash
# Builds every command of the project as a static, reproducible binary into $BIN (default bin/).
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-$PWD/bin}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
LDFLAGS="-s -w -X github.com/dummy-fuse-csi/dummy-fuse-csi/internal/version.Version=${VERSION}"

mkdir -p "$BIN"
for cmd in dummy-fuse dummy-fuse-workload csi-plugin csi-plugin/cmd/csi-remediate scenarios/cmd/dfc-scenario ${EXTRA_CMDS:-}; do
  [ -f "$cmd/main.go" ] || continue
  echo "building $BIN/$(basename "$cmd") ($VERSION)"
  CGO_ENABLED=0 go build -trimpath -ldflags "$LDFLAGS" -o "$BIN/$(basename "$cmd")" "./$cmd"
done
