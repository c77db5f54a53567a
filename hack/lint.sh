#!/usr/bin/env bash
# `make lint`: gofmt, go vet, staticcheck (built into bin/tools at a pinned version) and shellcheck over every
# shell script of the repository (installed from Debian when missing). The chart is linted by its Go tests
# (chart/chart_test.go runs helm's own linter, at the helm version go.mod pins).
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/lib.sh
source hack/lib.sh

STATICCHECK_VERSION=v0.8.2
TOOLS=${TOOLS:-$PWD/bin/tools}
if ! "$TOOLS/staticcheck" -version 2>/dev/null | grep -q "(${STATICCHECK_VERSION#v})"; then
  step "building staticcheck $STATICCHECK_VERSION into $TOOLS"
  GOBIN=$TOOLS go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
ensure_packages shellcheck:shellcheck

mapfile -t gofiles < <(git ls-files '*.go')
unformatted=$(gofmt -l "${gofiles[@]}")
[ -z "$unformatted" ] || die "gofmt needed on: $unformatted"
go vet ./...
"$TOOLS/staticcheck" ./...
# Every tracked shell script: *.sh and the extension-less ones that start with a bash shebang.
mapfile -t scripts < <(git ls-files | while IFS= read -r f; do
  [[ $f == *.sh ]] || head -n1 "$f" 2>/dev/null | grep -q '^#!.*bash' && echo "$f"
done)
shellcheck --external-sources "${scripts[@]}"
step "lint ok (gofmt, go vet, staticcheck, shellcheck of ${#scripts[@]} scripts)"
