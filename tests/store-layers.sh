#!/bin/sh
# The store is the databases' room alone (SQLite, libpq): no store source may include libuv or
# msgpack, directly or through another header (daemon/CMakeLists.txt).
# Asks the compiler which headers each one reads.
#   store-layers.sh CC INCLUDE_DIR... -- SOURCE...
set -eu
cc=$1
shift
incs=""
while [ "$1" != "--" ]; do
	incs="$incs -I$1"
	shift
done
shift
bad=0
for src in "$@"; do
	# shellcheck disable=SC2086
	deps=$("$cc" -M -D_GNU_SOURCE $incs "$src")
	hits=$(printf '%s\n' "$deps" | tr ' \\' '\n\n' |
		grep -E '(^|/)(uv\.h|uv/|msgpack\.h|msgpack/)' || true)
	if [ -n "$hits" ]; then
		echo "$(basename "$src") includes what the store must not:" >&2
		printf '  %s\n' $hits >&2
		bad=1
	fi
done
[ "$bad" -eq 0 ] && echo "store sources: $# checked, none includes libuv or msgpack"
exit "$bad"
