#!/usr/bin/env bash
# make release: the deployables built for release into dist/ — the
# all-in-one (dpcs), the processor (dpcs-processor), the API server
# (dpcs-server) and the simulator (dpcs-simulator) — for each platform,
# static (CGO_ENABLED=0: SQLite is pure Go), -trimpath, with the version,
# commit, commit time and work-tree state linked into internal/buildinfo
# (what -version prints and GET /version answers), and dist/SHA256SUMS.
# Not run in CI.
#
#   VERSION=v0.1.0         the release version (default: git describe --tags,
#                          or v0.0.0-<short commit> before the first tag)
#   PLATFORMS="linux/amd64 linux/arm64"   GOOS/GOARCH pairs (the default)
#   ALLOW_DIRTY=1          build from a work tree with uncommitted changes
#                          (the binaries then say +dirty / "modified": true)
#
# Check a build: dist/dpcs-server-v0.1.0-linux-amd64 -version;
# cd dist && sha256sum -c SHA256SUMS.
set -euo pipefail
cd "$(dirname "$0")/.."

commit=$(git rev-parse HEAD)
# The commit's time in UTC, as the Go toolchain stamps vcs.time.
date=$(TZ=UTC git show -s --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd HEAD)
modified=false
if [ -n "$(git status --porcelain)" ]; then
	if [ "${ALLOW_DIRTY:-0}" != 1 ]; then
		echo "release: the work tree has uncommitted changes (git status); commit them or set ALLOW_DIRTY=1" >&2
		exit 1
	fi
	modified=true
fi
version=${VERSION:-$(git describe --tags --match 'v[0-9]*' 2>/dev/null || echo "v0.0.0-$(git rev-parse --short=12 HEAD)")}
case $version in
v[0-9]*) ;;
*) echo "release: VERSION must look like v1.2.3, got '$version'" >&2; exit 1 ;;
esac
platforms=${PLATFORMS:-linux/amd64 linux/arm64}

pkg=github.com/dabom/dpcs/internal/buildinfo
ldflags="-s -w -X $pkg.version=$version -X $pkg.commit=$commit -X $pkg.date=$date -X $pkg.modified=$modified"

rm -rf dist
mkdir -p dist
for platform in $platforms; do
	goos=${platform%/*} goarch=${platform#*/}
	for cmd in dpcs processor server simulator; do
		name=dpcs-$cmd
		[ "$cmd" = dpcs ] && name=dpcs
		out=dist/$name-$version-$goos-$goarch
		echo "release: $out"
		CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath -ldflags "$ldflags" -o "$out" ./examples/$cmd
	done
done
(cd dist && sha256sum -- dpcs* >SHA256SUMS)
echo "release: $version (commit ${commit:0:7}, $date, modified=$modified) in dist/:"
cat dist/SHA256SUMS
