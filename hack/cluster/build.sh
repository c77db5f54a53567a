#!/usr/bin/env bash
# Builds the cluster's binaries from Go module source into $DFC_K8S_CACHE/bin (once; cached afterwards):
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl (k8s.io/kubernetes), etcd and helm.
# Only the Go module proxy is needed. k8s.io/kubernetes is not meant to be consumed as a module: its go.mod
# points the k8s.io/* staging modules at ./staging, which the module zip lacks, so a copy of it is built with
# those replaces dropped and the published k8s.io/* modules of the same release required instead.
set -o errexit -o nounset -o pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "$0")/lib.sh"

export CGO_ENABLED=0 GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=mod
HELM_VERSION=$(gomod_version helm.sh/helm/v3)
STAMP="$K8S_BIN/.built"
WANT="kubernetes=$K8S_VERSION etcd=$ETCD_VERSION helm=$HELM_VERSION"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd helm)

# One build per version at a time (two would delete each other's source copy); other versions build beside.
mkdir -p "$DFC_K8S_CACHE"
exec 8>"$DFC_K8S_CACHE/build.lock"
if ! flock -n 8; then
  step "waiting for another build of Kubernetes $K8S_VERSION to finish"
  flock 8
fi

cached() {
  [ "$(cat "$STAMP" 2>/dev/null)" = "$WANT" ] || return 1
  for b in "${BINARIES[@]}"; do [ -x "$K8S_BIN/$b" ] || return 1; done
}
if cached; then
  step "binaries cached in $K8S_BIN ($WANT)"
  exit 0
fi
mkdir -p "$K8S_BIN" "$DFC_K8S_CACHE/src"
rm -f "$STAMP"

# --- Kubernetes --------------------------------------------------------------------------------------------
src=$DFC_K8S_CACHE/src/kubernetes
step "downloading k8s.io/kubernetes@$K8S_VERSION from the module proxy"
moddir=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$moddir" ] || die "go mod download k8s.io/kubernetes@$K8S_VERSION gave no directory"
rm -rf "$src"
cp -r "$moddir" "$src"
chmod -R u+w "$src"
# vendor/ is incomplete in the module zip and go.work points at ./staging: build in module mode without them.
rm -rf "$src/vendor" "$src/go.work" "$src/go.work.sum"
sed -i -E -e '/=> \.\/staging\//d' \
  -e "s#^(\tk8s\.io/[a-z0-9-]+) v0\.0\.0\$#\1 $K8S_STAGING_VERSION#" "$src/go.mod"
if grep -q -E '=> \./staging|v0\.0\.0$' "$src/go.mod"; then die "rewriting $src/go.mod left staging references"; fi

# Version stamping as Kubernetes' hack/lib/version.sh does it (kubectl version, node info, /version).
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
# No "go mod download" of the whole build list: the proxy lacks some modules nothing here imports
# (k8s.io/sample-apiserver); go build fetches only what the commands need.
step "downloading and compiling kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl (several minutes cold)"
(cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$K8S_BIN/" \
  ./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler ./cmd/kubelet ./cmd/kubectl)

# --- etcd --------------------------------------------------------------------------------------------------
# go install refuses go.etcd.io/etcd/server/v3@version (its go.mod has replace directives), so build it from a
# throwaway module that requires it.
step "compiling etcd $ETCD_VERSION"
etcdsrc=$DFC_K8S_CACHE/src/etcd
rm -rf "$etcdsrc" && mkdir -p "$etcdsrc"
printf 'module dummy-fuse-csi.local/etcd-build\n\ngo 1.24\n' >"$etcdsrc/go.mod"
(cd "$etcdsrc" && { go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >get.log 2>&1 || { cat get.log >&2; exit 1; }; } &&
  go build -trimpath -ldflags "-s -w" -o "$K8S_BIN/etcd" go.etcd.io/etcd/server/v3)

# --- helm --------------------------------------------------------------------------------------------------
install_helm "$K8S_BIN"

echo "$WANT" >"$STAMP"
step "built ${BINARIES[*]} into $K8S_BIN"
