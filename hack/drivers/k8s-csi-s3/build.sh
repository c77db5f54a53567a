#!/usr/bin/env bash
# Builds yandex-cloud/k8s-csi-s3's node plugin (s3driver) from the Go module proxy and writes its image with
# hack/mkimage (FROM scratch, no container engine) to _output/images/drivers/k8s-csi-s3.tar, tagged $IMAGE of
# driver.env. The image holds what the plugin execs as children of its own container (pkg/driver, pkg/mounter):
#   /s3driver                 the plugin, static (ENTRYPOINT, at upstream's path)
#   /usr/bin/rclone           the rclone mounter's FUSE server, static (make servers WITH_RCLONE=1's build)
#   /usr/bin/fusermount3      what rclone's FUSE library (bazil.org/fuse) execs to mount
#   /usr/bin/mount, umount    NodePublishVolume's `mount --bind`, mount-utils' `umount`
#   their shared libraries and the dynamic loader at the paths ldd names (Debian's builds, as make image
#   carries squashfuse), and the bucket of the fake S3 (fake-s3.yaml): /srv/s3/dfc/dummy-file.txt.
set -o errexit -o nounset -o pipefail
DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$DIR/../../.." && pwd)
cd "$ROOT"
# shellcheck source=hack/lib.sh
source hack/lib.sh
# shellcheck source=hack/drivers/k8s-csi-s3/driver.env
source "$DIR/driver.env"

BIN=${BIN:-$ROOT/bin}
OUT=${IMAGE_OUTPUT:-$ROOT/_output/images}/drivers
CACHE=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dummy-fuse-csi/drivers}
RCLONE_VERSION=v1.76.0
CREATED=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}

ensure_packages mount:mount umount:mount dpkg-deb:dpkg

# s3driver: `go install MODULE@VERSION` asks the proxy for the module's version list (deprecation check), which it
# refuses for this module, so a throwaway module requires the exact version and builds its main package. Its
# only requirement is the driver, so the build list is the driver's own go.mod.
s3driver=$CACHE/k8s-csi-s3-$VERSION/s3driver
if [ ! -x "$s3driver" ]; then
  step "building s3driver $VERSION from the Go module proxy into $(dirname "$s3driver")"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (
    cd "$tmp"
    go mod init dfc-driver-build >/dev/null 2>&1
    go mod edit -require="$MODULE@$VERSION"
    GOFLAGS='-mod=mod -trimpath' CGO_ENABLED=0 go build -ldflags "-s -w" -o "$tmp/s3driver" "$MODULE/cmd/s3driver"
  )
  mkdir -p "$(dirname "$s3driver")"
  mv "$tmp/s3driver" "$s3driver"
fi
go version -m "$s3driver" | grep -q 'CGO_ENABLED=0' || die "$s3driver is not a static (CGO_ENABLED=0) build"
[ "$(go version -m "$s3driver" | awk '$1 == "mod" {print $3}')" = "$VERSION" ] || die "$s3driver is not $MODULE $VERSION"
mkdir -p "$BIN/drivers"
cp "$s3driver" "$BIN/drivers/s3driver.tmp" && mv "$BIN/drivers/s3driver.tmp" "$BIN/drivers/s3driver"

# rclone: make servers' build (cached per version).
rclone=$BIN/servers/rclone
if [ "$(go version -m "$rclone" 2>/dev/null | awk '$1 == "mod" {print $3}')" != "$RCLONE_VERSION" ]; then
  BIN=$BIN WITH_RCLONE=1 RCLONE_VERSION=$RCLONE_VERSION hack/servers.sh
fi
go version -m "$rclone" | grep -q 'CGO_ENABLED=0' || die "$rclone is not a static (CGO_ENABLED=0) build"

# fusermount3: the host's when fuse3 is installed; else taken out of Debian's fuse3 package without installing
# it, because fuse3 Breaks fuse (v2): installing it would remove the host's fusermount that others may use.
fusermount3=$(command -v fusermount3 || true)
if [ -z "$fusermount3" ]; then
  # The version of the installed libfuse3, else apt's candidate.
  version=$(dpkg-query -W -f '${Version}' libfuse3-3 2>/dev/null || true)
  [ -n "$version" ] || version=$(apt-cache policy fuse3 | awk '/Candidate:/ {print $2}')
  [[ -n $version && $version != "(none)" ]] || die "no fuse3 package known to apt (apt-get update?)"
  deb=$CACHE/fuse3-$version
  if [ ! -x "$deb/bin/fusermount3" ]; then
    step "extracting fusermount3 from Debian's fuse3 $version into $deb"
    mkdir -p "$CACHE" && rm -rf "$deb.tmp" && mkdir -p "$deb.tmp"
    (cd "$deb.tmp" && apt-get download "fuse3=$version" >/dev/null 2>&1) || die "apt-get download fuse3=$version failed"
    dpkg-deb -x "$deb.tmp"/fuse3_*.deb "$deb.tmp/root"
    rm -rf "$deb" && mv "$deb.tmp/root" "$deb" && rm -rf "$deb.tmp"
  fi
  fusermount3=$deb/bin/fusermount3
fi

files=(--file "$BIN/drivers/s3driver:/s3driver" --file "$rclone:/usr/bin/rclone"
  --file "$fusermount3:/usr/bin/fusermount3" --file "$(command -v mount):/usr/bin/mount"
  --file "$(command -v umount):/usr/bin/umount")
# The shared libraries ldd names at the same paths (the loader's default dirs) and the loader at the path the
# executables name; each once.
declare -A seen=()
while read -r lib; do
  [ -n "${seen[$lib]:-}" ] && continue
  seen[$lib]=1
  files+=(--file "$lib:$lib")
done < <(for exe in "$fusermount3" "$(command -v mount)" "$(command -v umount)"; do
  ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
done)

mkdir -p "$OUT"
go build -o "$BIN/tools/mkimage" ./hack/mkimage
# HOME: rclone keeps its VFS write cache (--vfs-cache-mode=writes) under $HOME/.cache.
"$BIN/tools/mkimage" --tag "$IMAGE" --output "$OUT/k8s-csi-s3.tar" --created "$CREATED" "${files[@]}" \
  --served-tree "$S3_ROOT/$BUCKET" --dir /tmp:1777 --dir /root:700 \
  --env PATH=/usr/bin:/bin --env HOME=/root --entrypoint /s3driver \
  --label "org.opencontainers.image.title=k8s-csi-s3" --label "org.opencontainers.image.version=$VERSION"
echo "$IMAGE" >"$OUT/k8s-csi-s3.ref"
step "wrote $OUT/k8s-csi-s3.tar ($IMAGE)"
