#!/bin/sh
# Regenerates the seed corpora of fuzz_frame, fuzz_receipt and fuzz_json
# (tests/fuzz/corpus/{frame,receipt,json}/seed-*) from the shared receipt
# vectors, plus a few hostile inputs. The corpora are checked in; run this
# only when the vectors change. Crashers found by scripts/fuzz.sh are added
# beside the seeds as crash-* and never removed; hand-made seeds of
# fuzz_json (seed-dup.json and the like) are kept too.
#   tests/fuzz/make-corpus.sh
set -eu
cd "$(dirname "$0")"
vec=../data/vectors
out=corpus/frame
mkdir -p "$out"
rm -f "$out"/seed-*

# Writes the 4-byte big-endian length n. The format strings are built on
# purpose: printf turns the octal escapes into bytes.
# shellcheck disable=SC2059
be32() {
	printf "\\$(printf %03o $(($1 >> 24 & 255)))"
	printf "\\$(printf %03o $(($1 >> 16 & 255)))"
	printf "\\$(printf %03o $(($1 >> 8 & 255)))"
	printf "\\$(printf %03o $(($1 & 255)))"
}

# frame FILE: wraps the msgpack object in FILE as one frame on stdout.
frame() {
	be32 "$(wc -c <"$1")"
	cat "$1"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# {"op": "receipt", "id": 1, "body": <vector>} for every vector and form.
for f in "$vec"/*.msgpack; do
	name=$(basename "$f" .msgpack)
	{ printf '\203\242op\247receipt\242id\001\244body'; cat "$f"; } >"$tmp/env"
	frame "$tmp/env" >"$out/seed-receipt-$name"
done

# A batch of three receipts in both forms, and one with an invalid item.
{
	printf '\203\242op\250receipts\242id\002\244body\223'
	cat "$vec/s1_full_coverage_cpu.named.msgpack" \
		"$vec/s2_u64_max.compact.msgpack" \
		"$vec/s3_full_coverage_latency.compact.msgpack"
} >"$tmp/env"
frame "$tmp/env" >"$out/seed-receipts-batch"
{
	printf '\204\242op\250receipts\242id\003\243seq\315\001\000\244body\222'
	cat "$vec/s2_non_ascii.named.msgpack"
	printf '\201\256schema_version\004'
} >"$tmp/env"
frame "$tmp/env" >"$out/seed-receipts-one-bad"

# Receipts with unknown keys: one more entry in the top-level fixmap.
for v in s1_minimal_cuda s2_backend_cpu s3_minimal; do
	f="$vec/$v.named.msgpack"
	first=$(od -An -tu1 -N1 "$f" | tr -d ' ')
	{
		printf '\203\242op\247receipt\242id\004\244body'
		# shellcheck disable=SC2059
		printf "\\$(printf %03o $((first + 1)))"
		tail -c +2 "$f"
		printf '\247flavour\222\001\241x'
	} >"$tmp/env"
	frame "$tmp/env" >"$out/seed-unknown-key-$v"
done

# Two frames in one input: a ping, then a receipt.
printf '\202\242op\244ping\242id\005' >"$tmp/ping"
{ frame "$tmp/ping"; cat "$out/seed-receipt-s3_minimal.compact"; } \
	>"$out/seed-two-frames"
printf '\203\242op\245hello\242id\006\244body\201\250protocol\001' \
	>"$tmp/hello"
frame "$tmp/hello" >"$out/seed-hello"

# Hostile frames.
printf '\000\000\000\000' >"$out/seed-length-zero"
printf '\377\377\377\377\001\002\003' >"$out/seed-length-max"
printf '\000\001\000\001\201' >"$out/seed-length-over-max"
printf '\000\000\000\144\203\242op' >"$out/seed-truncated"
printf '\000\000\000\005\335\377\377\377\377' >"$out/seed-lying-array32"
printf '\000\000\000\005\333\177\377\377\377' >"$out/seed-lying-str32"
printf '\000\000\000\001\301' >"$out/seed-c1"
printf '\000\000\000\002\300\300' >"$out/seed-trailing"
printf '\202\242op\243fly\242id\007' >"$tmp/env"
frame "$tmp/env" >"$out/seed-unknown-op"
{
	printf '\203\242op\247receipt\242id\010\244body'
	i=0
	while [ $i -lt 31 ]; do printf '\221'; i=$((i + 1)); done
	printf '\001'
} >"$tmp/env"
frame "$tmp/env" >"$out/seed-nesting-32"
{
	printf '\203\242op\247receipt\242id\011\244body'
	i=0
	while [ $i -lt 32 ]; do printf '\221'; i=$((i + 1)); done
	printf '\001'
} >"$tmp/env"
frame "$tmp/env" >"$out/seed-nesting-33"
# fuzz_receipt: the bodies alone, in both forms, and with unknown keys.
rout=corpus/receipt
mkdir -p "$rout"
rm -f "$rout"/seed-*
for f in "$vec"/*.msgpack; do
	cp "$f" "$rout/seed-$(basename "$f" .msgpack)"
done
for f in "$out"/seed-unknown-key-*; do
	# Drops the frame header and the 21-byte envelope before the body.
	tail -c +26 "$f" >"$rout/$(basename "$f")"
done

# fuzz_json: the serde_json files.
jout=corpus/json
mkdir -p "$jout"
for f in "$vec"/*.json; do
	[ "$(basename "$f")" = index.json ] && continue
	cp "$f" "$jout/seed-$(basename "$f")"
done

find "$out" "$rout" "$jout" -type f | wc -l
