#!/usr/bin/env bash
# `make server-image SERVER=rclone`: the image of a FUSE server as an operator has one, for the chart's
# fuseServer.image (chart/README.md), written without a container engine (hack/mkimage): FROM scratch, the
# server's static executable of make servers at /usr/local/bin/<server>, Debian's static busybox as /bin/cp
# (what the chart's default fuseServer.copyCommand runs), and the tree every server of the testbed serves at
# /srv/dfc. Written to _output/images/servers/<server>.tar as dfc-server/<server>:<version>, and imported into
# the from-source cluster when it runs (make cluster-up). Nothing of dummy-fuse-csi is in it.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=hack/cluster/lib.sh
source hack/cluster/lib.sh

SERVER=${1:?usage: $0 SERVER (a static executable of make servers, e.g. rclone: make servers WITH_RCLONE=1)}
BIN=${BIN:-$PWD/bin}
OUT=${IMAGE_OUTPUT:-$PWD/_output/images}/servers
exe=$BIN/servers/$SERVER
[ -x "$exe" ] || die "$exe missing: make servers (WITH_RCLONE=1 for rclone)"
go version -m "$exe" | grep -q 'CGO_ENABLED=0' || die "$exe is not a static (CGO_ENABLED=0) build: FROM scratch has no libc"
version=$(go version -m "$exe" | awk '$1 == "mod" {print $3; exit}')
ensure_packages /bin/busybox:busybox-static
{ ldd /bin/busybox 2>&1 || true; } | grep -q 'not a dynamic' || die "/bin/busybox is not static (busybox-static)"
tag=dfc-server/$SERVER:${version:-dev}
mkdir -p "$OUT"
go build -o "$BIN/tools/mkimage" ./hack/mkimage
"$BIN/tools/mkimage" --tag "$tag" --output "$OUT/$SERVER.tar" --file "$exe:/usr/local/bin/$SERVER" \
  --file /bin/busybox:/bin/cp --served-tree /srv/dfc --dir /tmp:1777 --env PATH=/usr/local/bin:/bin \
  --label "org.opencontainers.image.title=$SERVER"
echo "$tag" >"$OUT/$SERVER.ref"
step "wrote $OUT/$SERVER.tar ($tag)"
if [ -S "$CONTAINERD_SOCK" ]; then
  step "importing it into the cluster's containerd"
  ctr_k8s images import "$OUT/$SERVER.tar" >/dev/null
fi
