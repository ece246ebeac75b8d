#!/bin/sh
# Builds the Debian package from debian/ and checks it with lintian:
#
#   scripts/build-deb.sh [OUTDIR]      (default: build-deb/)
#
# dpkg-buildpackage -us -uc -b runs in a copy of the tree (it writes into
# the source tree and its parent directory), with the project's build
# dependencies installed (scripts/install-deps.sh). OUTDIR gets the .deb,
# the -dbgsym .deb, .buildinfo and .changes; then lintian runs over the
# .changes, and any error or warning fails the script. The package's own
# test run is skipped unless DEB_BUILD_OPTIONS says otherwise (CI and
# scripts/test.sh run the suite; DEB_BUILD_OPTIONS= runs it again).
set -eu
cd "$(dirname "$0")/.."
out=${1:-build-deb}
mkdir -p "$out"
out=$(cd "$out" && pwd)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT INT TERM
src=$stage/receiptd
mkdir "$src"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	# What git tracks or would track: no build directories, no state.
	git ls-files -z --cached --others --exclude-standard |
		tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$src"
else
	tar --exclude='./build*' --exclude=./state --exclude=./fuzz-out -cf - . |
		tar -xf - -C "$src"
fi

(
	cd "$src"
	DEB_BUILD_OPTIONS=${DEB_BUILD_OPTIONS-"nocheck parallel=$(nproc)"} \
		dpkg-buildpackage -us -uc -b
) >"$stage/build.log" 2>&1 || {
	tail -n 60 "$stage/build.log" >&2
	echo "build-deb: dpkg-buildpackage failed" >&2
	exit 1
}
rm -f "$out"/receiptd_* "$out"/receiptd-dbgsym_*
cp "$stage"/receiptd_* "$out"/
cp "$stage"/receiptd-dbgsym_* "$out"/ 2>/dev/null || true
changes=$(ls "$out"/receiptd_*.changes)
ls -l "$out"

echo "== lintian $(basename "$changes")"
lintian --version
lintian --fail-on error,warning --display-info "$changes"
echo "lintian: no errors, no warnings"
