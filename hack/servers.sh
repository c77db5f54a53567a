#!/usr/bin/env bash
# `make servers`: the real FUSE servers the testbed runs beside dummy-fuse (internal/fuseserver), into
# $BIN/servers (default bin/servers):
#   gcsfuse          github.com/googlecloudplatform/gcsfuse/v3, static, from the Go module proxy
#   fake-gcs-server  github.com/fsouza/fake-gcs-server, static: the bucket gcsfuse reads, in memory
#   squashfuse       Debian's (libfuse3), with mksquashfs to make its image
#   rclone           github.com/rclone/rclone, static, from the Go module proxy: only with WITH_RCLONE=1 (a server
#                    users run, described in a spec file, docs/servers/rclone.yaml, not built into the testbed)
# The Go builds are cached per version in $CACHE (a cold build downloads ~1.8 GB of modules and takes minutes;
# later runs copy the cached binaries). Tests and scenarios find the servers in $BIN/servers or $PATH.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/lib.sh
source hack/lib.sh

BIN=${BIN:-$PWD/bin}
CACHE=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dummy-fuse-csi/servers}
# gcsfuse v3.11.4 is the newest that the project's Go (1.26) builds; v3.13 needs Go 1.27.
GCSFUSE_VERSION=${GCSFUSE_VERSION:-v3.11.4}
FAKE_GCS_VERSION=${FAKE_GCS_VERSION:-v1.56.1}
RCLONE_VERSION=${RCLONE_VERSION:-v1.76.0}

ensure_packages squashfuse:squashfuse mksquashfs:squashfs-tools

# go_server NAME MODULE VERSION: builds MODULE@VERSION's main package into the cache unless there, then copies
# it into $BIN/servers/NAME.
go_server() {
  local name=$1 module=$2 version=$3 dir
  dir=$CACHE/$name-$version
  if [ ! -x "$dir/$name" ]; then
    step "building $name $version from the Go module proxy into $dir (cold: minutes)"
    mkdir -p "$dir.tmp"
    rm -rf "$dir.tmp"
    GOBIN=$dir.tmp GOFLAGS='' CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "$module@$version"
    rm -rf "$dir" && mv "$dir.tmp" "$dir"
  fi
  mkdir -p "$BIN/servers"
  cp "$dir/$name" "$BIN/servers/$name.tmp" && mv "$BIN/servers/$name.tmp" "$BIN/servers/$name"
  echo "$BIN/servers/$name: $name $version"
}

go_server gcsfuse github.com/googlecloudplatform/gcsfuse/v3 "$GCSFUSE_VERSION"
go_server fake-gcs-server github.com/fsouza/fake-gcs-server "$FAKE_GCS_VERSION"
[ "${WITH_RCLONE:-}" != 1 ] || go_server rclone github.com/rclone/rclone "$RCLONE_VERSION"
echo "squashfuse: $(command -v squashfuse) ($(dpkg-query -W -f '${Version}' squashfuse 2>/dev/null))"
