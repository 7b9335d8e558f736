#!/usr/bin/env bash
# Writes the seed corpora of the fuzz harnesses into tests/fuzz/corpus/<harness>/ (committed; run
# this again only to change them). Each seed is a valid input in the harness's input format (see
# the comment at the top of tests/fuzz/fuzz_<harness>.cpp): small IDX files, plain and gzip'd,
# Fashion-MNIST-shaped directories, layout_map keys with paths, accepted and rejected, and values of
# TESSEL_COLLECTIVE_TIMEOUT.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$here/corpus
rm -rf "$out"
mkdir -p "$out/idx" "$out/fashion_mnist" "$out/regex" "$out/collective_timeout"

byte() { printf "\\x$(printf %02x "$1")"; }
be32() { byte $(($1 >> 24 & 255)); byte $(($1 >> 16 & 255)); byte $(($1 >> 8 & 255)); byte $(($1 & 255)); }
le16() { byte $(($1 & 255)); byte $(($1 >> 8 & 255)); }
# idx N VALUE D1 D2 ...: an IDX file of unsigned bytes with that shape, every value VALUE, or
# 0, 1, 2, ... (mod 256) when VALUE is "ramp".
idx() {
  local value=$1 count=1
  shift
  printf '\x00\x00\x08'
  byte $#
  for d in "$@"; do be32 "$d"; count=$((count * d)); done
  if [[ $value == ramp ]]; then
    for ((i = 0; i < count; ++i)); do byte $((i % 256)); done
  else
    for ((i = 0; i < count; ++i)); do byte "$value"; done
  fi
}

# --- idx: a mode byte (0 plain, 1 gzip'd by the harness, 2 raw bytes as input.gz, 3 two damage
# parameters then gzip'd and damaged), then the IDX file.
idx ramp 5 >"$out/idx/labels"              # labels (5,)
idx ramp 2 3 3 >"$out/idx/images"          # images (2, 3, 3)
idx 7 >"$out/idx/scalar"                   # rank 0: one value
idx 0 0 5 >"$out/idx/empty"                # (0, 5): no values
for f in labels images scalar empty; do
  { byte 0; cat "$out/idx/$f"; } >"$out/idx/plain_$f"
  { byte 1; cat "$out/idx/$f"; } >"$out/idx/gzip_$f"
  { byte 2; gzip -9 -n -c "$out/idx/$f"; } >"$out/idx/raw_gz_$f"
  rm "$out/idx/$f"
done
{ byte 3; byte 0; byte 0; idx ramp 5; } >"$out/idx/damaged_none_labels"        # undamaged
{ byte 3; byte 8; byte 0; idx ramp 5; } >"$out/idx/damaged_cut8_labels"        # trailer cut off
{ byte 3; byte 0x18; byte 12; idx ramp 2 3 3; } >"$out/idx/damaged_cut8_flip_images"

# --- fashion_mnist: a flags byte (bits 0-3 gzip file i, bit 4 the directory through
# TESSEL_FASHION_MNIST_DIR, bit 5 a directory that does not exist), then four chunks, each a
# 2-byte little-endian length and the file.
chunk() { local tmp; tmp=$(mktemp); "$@" >"$tmp"; le16 "$(stat -c %s "$tmp")"; cat "$tmp"; rm "$tmp"; }
fashion() {
  local flags=$1 n=$2
  byte "$flags"
  chunk idx 3 "$n" 28 28
  chunk idx 3 "$n"
  chunk idx 9 "$n" 28 28
  chunk idx 9 "$n"
}
fashion 0x00 1 >"$out/fashion_mnist/plain_1"
fashion 0x0f 2 >"$out/fashion_mnist/gzip_2"
fashion 0x15 1 >"$out/fashion_mnist/env_mixed_1"
{ byte 0x00; chunk idx 3 1 28 28; chunk idx 3 1; } >"$out/fashion_mnist/test_files_missing"

# --- regex: the pattern, a 0 byte, the text (forms from tests/unit/regex_test.cpp).
n=0
while IFS= read -r line; do
  printf '%s' "$line" | tr '\t' '\0' >"$out/regex/$(printf %02d $n)"
  n=$((n + 1))
done <<'EOF'
dense/kernel	dense/kernel
.*dense.*bias	dense_2/bias
dense_[0-9]+/kernel	dense_12/kernel
conv2d(_\d+)?/kernel	conv2d_7/kernel
(d1|d2)/bias	d3/bias
([^/]+/)*kernel	block/dense/kernel
(?:encoder|decoder)/layer_\d+/(query|key|value)/kernel	encoder/layer_11/value/kernel
(\w+/)+bias	a/b_c/bias
[\w.-]+/kernel	dense-1.v2/kernel
\S+\s\S+	a b
(ab|a)*b	abab
(a*)+	
.*?/kernel	x/kernel
[a-c-e]+	a-e
[]x]+	]x]
[^]x]+	ab
[\]\\-]+	]\-
dense_[0-9]{1,3}/kernel	dense_1/kernel
(d1|d2))/bias	d1/bias
a+?+	aa
[a-\w]	a
EOF
# --- collective_timeout: TESSEL_COLLECTIVE_TIMEOUT's value, accepted and refused.
n=0
for v in 600 0 1.5 0.25e1 0x1p4 1e400 inf nan -1 '' ' 5' 5s; do
  printf '%s' "$v" >"$out/collective_timeout/$(printf %02d $n)"
  n=$((n + 1))
done
echo "seeds: $(find "$out" -type f | wc -l) files in $out"
