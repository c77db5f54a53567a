#!/usr/bin/env bash
# `make image`: builds the project's static binaries and writes three FROM-scratch image tarballs without a
# container engine (hack/mkimage, github.com/google/go-containerregistry):
#   _output/images/dummy-fuse-csi-<version>.tar  dummy-fuse-csi:<version>  csi-plugin, csi-remediate,
#                                                 dummy-fuse, dummy-fuse-workload in /usr/local/bin (no ENTRYPOINT);
#                                                 the real FUSE servers of make servers beside them: gcsfuse and
#                                                 fake-gcs-server (static), with the fake's bucket in $GCS_DATA;
#                                                 Debian's squashfuse with its shared libraries and the dynamic
#                                                 loader at their host paths, and its image $SQUASHFS_IMAGE
#   _output/images/dummy-fuse-csi-<version>-next.tar  the same with the next build of csi-plugin and dummy-fuse
#                                                 (<version>-next), for the keeper-upgrade scenario
#   _output/images/pause-3.10.tar                dummy-fuse-csi/pause:3.10  the cluster's pod sandbox image
# Load with `kind load image-archive FILE`, `docker load -i FILE` or `ctr -n k8s.io images import FILE`
# (`make cluster-load-images` for the from-source cluster). _output/images/dummy-fuse-csi.ref holds the tag.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/../.."

BIN=${BIN:-$PWD/bin}
OUT=${IMAGE_OUTPUT:-$PWD/_output/images}
# Same version as hack/build.sh stamps into the binaries, made a valid tag.
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
TAG_VERSION=$(printf '%s' "$VERSION" | tr -c 'A-Za-z0-9_.-' '-')
IMAGE=${IMAGE_NAME:-dummy-fuse-csi}:$TAG_VERSION
PAUSE_IMAGE=${PAUSE_IMAGE:-dummy-fuse-csi/pause:3.10}
IMAGE_CMDS=${IMAGE_CMDS:-csi-plugin csi-remediate dummy-fuse dummy-fuse-workload}
# The real FUSE servers (hack/servers.sh, cached builds) and where the fake GCS server loads its bucket from
# (-data: one dir per bucket; the chart's fake-gcs container reads it).
IMAGE_SERVERS=${IMAGE_SERVERS:-gcsfuse fake-gcs-server}
GCS_DATA=/usr/local/share/dummy-fuse-csi/gcs
SQUASHFS_IMAGE=/usr/local/share/dummy-fuse-csi/tree.squashfs
# Reproducible: stamp the images with the commit time, as SOURCE_DATE_EPOCH asks.
CREATED=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}

VERSION=$VERSION EXTRA_CMDS="hack/pause ${EXTRA_CMDS:-}" hack/build.sh
[ -z "$IMAGE_SERVERS" ] || BIN=$BIN hack/servers.sh

files=()
for cmd in $IMAGE_CMDS; do
  [ -x "$BIN/$cmd" ] || { echo "image: $BIN/$cmd missing: does ./$cmd build?" >&2; exit 1; }
  files+=(--file "$BIN/$cmd:/usr/local/bin/$cmd")
done
# The bucket is gcsfuse's default one (fuseserver.DefaultBucket), holding the served tree.
server_files=(--served-tree "$GCS_DATA/dummy-fuse-csi")
statics=()
for server in $IMAGE_SERVERS; do
  [ -x "$BIN/servers/$server" ] || { echo "image: $BIN/servers/$server missing (make servers)" >&2; exit 1; }
  server_files+=(--file "$BIN/servers/$server:/usr/local/bin/$server")
  statics+=("servers/$server")
done
# squashfuse is Debian's dynamically linked build (make servers installs it): the libraries ldd names, at the
# same paths (the loader's default dirs), the loader at the path the executable names.
squashfuse=$(command -v squashfuse) || { echo "image: no squashfuse (make servers)" >&2; exit 1; }
server_files+=(--file "$squashfuse:/usr/local/bin/squashfuse" --squashfs-tree "$SQUASHFS_IMAGE")
while read -r lib; do
  server_files+=(--file "$lib:$lib")
done < <(ldd "$squashfuse" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
# FROM scratch has no libc: refuse a binary that was linked against one.
for bin in $IMAGE_CMDS pause "${statics[@]}"; do
  if ! go version -m "$BIN/$bin" | grep -q 'CGO_ENABLED=0'; then
    echo "image: $BIN/$bin is not a static (CGO_ENABLED=0) build" >&2; exit 1
  fi
done

go build -o "$BIN/tools/mkimage" ./hack/mkimage
"$BIN/tools/mkimage" --tag "$IMAGE" --output "$OUT/dummy-fuse-csi-$TAG_VERSION.tar" --created "$CREATED" \
  "${files[@]}" "${server_files[@]}" --dir /tmp:1777 --env PATH=/usr/local/bin \
  --cmd /usr/local/bin/csi-plugin \
  --label "org.opencontainers.image.title=dummy-fuse-csi" \
  --label "org.opencontainers.image.version=$VERSION"
# The next build (make build's bin/next: csi-plugin and dummy-fuse stamped <version>-next), what the keeper-upgrade
# scenario rolls the keeper to: the same image with those two binaries.
NEXT_IMAGE=${IMAGE}-next
next_files=()
for cmd in $IMAGE_CMDS; do
  src=$BIN/$cmd
  [ -x "$BIN/next/$cmd" ] && src=$BIN/next/$cmd
  next_files+=(--file "$src:/usr/local/bin/$cmd")
done
"$BIN/tools/mkimage" --tag "$NEXT_IMAGE" --output "$OUT/dummy-fuse-csi-$TAG_VERSION-next.tar" --created "$CREATED" \
  "${next_files[@]}" "${server_files[@]}" --dir /tmp:1777 --env PATH=/usr/local/bin \
  --cmd /usr/local/bin/csi-plugin \
  --label "org.opencontainers.image.title=dummy-fuse-csi" \
  --label "org.opencontainers.image.version=$VERSION-next"
"$BIN/tools/mkimage" --tag "$PAUSE_IMAGE" --output "$OUT/pause-3.10.tar" --created "$CREATED" \
  --file "$BIN/pause:/pause" --entrypoint /pause \
  --label "org.opencontainers.image.title=dummy-fuse-csi pause"
echo "$IMAGE" >"$OUT/dummy-fuse-csi.ref"
echo "image $IMAGE in $OUT/dummy-fuse-csi-$TAG_VERSION.tar, its next build $NEXT_IMAGE in $OUT/dummy-fuse-csi-$TAG_VERSION-next.tar"
