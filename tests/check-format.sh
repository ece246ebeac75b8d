#!/bin/sh
# Fails when a tracked C source is not formatted as .clang-format says.
set -eu
top=${1:-.}
cd "$top"
fmt=$(command -v clang-format-14 || command -v clang-format)
bad=0
for f in $(git ls-files --cached --others --exclude-standard '*.c' '*.h' 2>/dev/null || find proto daemon client tests bench -name '*.[ch]'); do
	if ! "$fmt" --dry-run --Werror "$f" >/dev/null 2>&1; then
		echo "not formatted: $f (run: clang-format -i $f)"
		bad=1
	fi
done
[ "$bad" -eq 0 ] && echo "clang-format: all sources formatted"
exit "$bad"
