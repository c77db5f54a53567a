#!/usr/bin/env bash
# Builds every command of the project as a static, reproducible binary into $BIN (default bin/), and a "next"
# build of the keeper's two binaries (csi-plugin, dummy-fuse) into $BIN/next, stamped <version>-next: what the
# keeper-upgrade scenario rolls the keeper to (a new build, another version).
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-$PWD/bin}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}

build() { # build OUT_DIR VERSION CMD...
  local out=$1 version=$2 cmd
  shift 2
  mkdir -p "$out"
  for cmd in "$@"; do
    [ -f "$cmd/main.go" ] || continue
    echo "building $out/$(basename "$cmd") ($version)"
    CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/dummy-fuse-csi/dummy-fuse-csi/internal/version.Version=$version" \
      -o "$out/$(basename "$cmd")" "./$cmd"
  done
}

# shellcheck disable=SC2086 # EXTRA_CMDS is a list
build "$BIN" "$VERSION" dummy-fuse dummy-fuse-workload csi-plugin csi-plugin/cmd/csi-remediate scenarios/cmd/dfc-scenario ${EXTRA_CMDS:-}
build "$BIN/next" "$VERSION-next" csi-plugin dummy-fuse
