#!/usr/bin/env bash
# Runs the whole test suite. Tests that need root and /dev/fuse skip for an ordinary user;
# with DFC_REQUIRE_PRIVILEGED=1 (CI) such a skip is a failure.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

go vet ./...
read -r -a flags <<<"${GOTESTFLAGS:-}" # extra go test flags, e.g. GOTESTFLAGS="-run TestX -v"
go test -count=1 -timeout 30m "${flags[@]}" ./...
