#!/usr/bin/env bash
# `make server-image SERVER=rclone`: the image of a FUSE server as an operator has one, for the chart's
# fuseServer.image (chart/README.md), written without a container engine (hack/mkimage): FROM scratch, the
# server's executable, Debian's static busybox as /bin/cp (what the chart's default fuseServer.copyCommand runs),
# and the tree every server of the testbed serves at /srv/dfc. The executable is a static one of make servers at
# /usr/local/bin/<server> (rclone), or else a dynamically linked one of this machine's $PATH (Debian's s3fs) at
# /usr/bin/<server>, with the shared libraries ldd lists in /usr/lib/<server>-libs and its loader at the path its
# ELF header names: what the chart copies with fuseServer.files and fuseServer.interpreter. Written to
# _output/images/servers/<server>.tar as dfc-server/<server>:<version>, and imported into the from-source cluster
# when it runs (make cluster-up). Nothing of dummy-fuse-csi is in it.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=hack/cluster/lib.sh
source hack/cluster/lib.sh

SERVER=${1:?usage: $0 SERVER (a static executable of make servers, e.g. rclone: make servers WITH_RCLONE=1)}
BIN=${BIN:-$PWD/bin}
OUT=${IMAGE_OUTPUT:-$PWD/_output/images}/servers
exe=$BIN/servers/$SERVER
files=()
if [ -x "$exe" ]; then
  go version -m "$exe" | grep -q 'CGO_ENABLED=0' || die "$exe is not a static (CGO_ENABLED=0) build: FROM scratch has no libc"
  version=$(go version -m "$exe" | awk '$1 == "mod" {print $3; exit}')
  files+=(--file "$exe:/usr/local/bin/$SERVER")
else
  exe=$(command -v "$SERVER") || die "$SERVER: neither $BIN/servers/$SERVER (make servers; WITH_RCLONE=1 for rclone) nor in \$PATH (apt-get install $SERVER)"
  exe=$(readlink -f "$exe")
  loader=$(readelf -l "$exe" | sed -n 's/.*Requesting program interpreter: \(.*\)]$/\1/p')
  [ -n "$loader" ] || die "$exe: neither static from make servers nor a dynamic executable with a loader"
  pkg=$(dpkg-query -S "$exe" 2>/dev/null | cut -d: -f1 | head -n1) || true
  version=$( [ -z "$pkg" ] || dpkg-query -W -f='${Version}' "$pkg")
  files+=(--file "$exe:/usr/bin/$SERVER" --file "$(readlink -f "$loader"):$loader")
  n=0
  while read -r lib; do
    files+=(--file "$(readlink -f "$lib"):/usr/lib/$SERVER-libs/$(basename "$lib")")
    n=$((n + 1))
  done < <(ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
  step "$exe is dynamic: $n shared libraries into /usr/lib/$SERVER-libs, its loader at $loader"
fi
ensure_packages /bin/busybox:busybox-static
{ ldd /bin/busybox 2>&1 || true; } | grep -q 'not a dynamic' || die "/bin/busybox is not static (busybox-static)"
tag=dfc-server/$SERVER:${version:-dev}
mkdir -p "$OUT"
go build -o "$BIN/tools/mkimage" ./hack/mkimage
"$BIN/tools/mkimage" --tag "$tag" --output "$OUT/$SERVER.tar" "${files[@]}" \
  --file /bin/busybox:/bin/cp --served-tree /srv/dfc --dir /tmp:1777 --env PATH=/usr/local/bin:/bin \
  --label "org.opencontainers.image.title=$SERVER"
echo "$tag" >"$OUT/$SERVER.ref"
step "wrote $OUT/$SERVER.tar ($tag)"
if [ -S "$CONTAINERD_SOCK" ]; then
  step "importing it into the cluster's containerd"
  ctr_k8s images import "$OUT/$SERVER.tar" >/dev/null
fi
