#!/usr/bin/env bash
# gofmt, go vet and staticcheck. staticcheck is installed into bin/tools at a pinned version.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

STATICCHECK_VERSION=v0.8.2
TOOLS=${TOOLS:-$PWD/bin/tools}
if ! "$TOOLS/staticcheck" -version 2>/dev/null | grep -q "(${STATICCHECK_VERSION#v})"; then
  echo "installing staticcheck $STATICCHECK_VERSION into $TOOLS"
  GOBIN=$TOOLS go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi

unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt needed on:"; echo "$unformatted"; exit 1
fi
go vet ./...
"$TOOLS/staticcheck" ./...
echo "lint ok"
