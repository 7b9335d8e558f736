#!/usr/bin/env bash
# Writes the seed corpora of the fuzz harnesses into tests/fuzz/corpus/<harness>/ (committed; run
# this again only to change them). Each seed is a valid input in the harness's input format (see
# the comment at the top of tests/fuzz/fuzz_<harness>.cpp): small IDX files, plain and gzip'd,
# Fashion-MNIST-shaped directories, layout_map keys with paths, accepted and rejected, values of
# TESSEL_COLLECTIVE_TIMEOUT, and for the saving harnesses (written by the Python part below, from
# tests/golden/saving/): checkpoint manifests with their shards, backup metadata, the config.json of
# Keras's archives, zip archives and weights files.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$here/corpus
rm -rf "$out"
mkdir -p "$out/idx" "$out/fashion_mnist" "$out/regex" "$out/collective_timeout" \
  "$out/checkpoint_manifest" "$out/checkpoint_metadata" "$out/keras_config" "$out/zip" \
  "$out/weights_precheck" "$out/weights_index" "$out/checkpoint_path"

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
# --- checkpoint_path: a byte for what lies at work/ckpt (low 3 bits) and work/ckpt.partial (next
# 3), then the path ($S: the sandbox, $H: the home directory).
cpath() { { byte "$1"; printf '%s' "$2"; } >"$out/checkpoint_path/$3"; }
cpath 2 ckpt replace_checkpoint; cpath 2 ckpt/ trailing_separator; cpath 2 ./ckpt/. dots
cpath 0 . working_dir; cpath 0 .. parent; cpath 0 ../work parent_named; cpath 0 / root
cpath 0 // root_twice; cpath 0 '$H' home; cpath 0 '$H/' home_slash; cpath 0 '$S/work' work_absolute
cpath 0 '$S' sandbox; cpath 1 ckpt user_file; cpath 3 ckpt/ checkpoint_with_user_file
cpath 4 ckpt empty_dir; cpath 5 ckpt symlink; cpath 6 ckpt shard_named_dir
cpath 7 ckpt other_manifest; cpath $((2 | 1 << 3)) ckpt staging_is_user_file
cpath $((2 | 2 << 3)) ckpt staging_left_over; cpath $((3 << 3)) ckpt staging_with_user_file
cpath 2 ckpt/../ckpt up_and_back; cpath 2 '$S/work/ckpt/' absolute_trailing
cpath 0 new/run/ckpt nested_new; cpath 2 ../work/ckpt via_parent; cpath 5 ckpt/inner through_symlink
# --- the saving harnesses' seeds (Python: JSON, CRC-32 and zip as the formats need them).
python3 - "$out" "$here/../golden/saving" <<'EOF'
import io, json, os, struct, sys, zipfile, zlib

out, golden = sys.argv[1], sys.argv[2]
def write(harness, name, data):
    with open(os.path.join(out, harness, name), "wb") as f:
        f.write(data)

# checkpoint_manifest: the manifest's text, a 0 byte, then each shard file as a 2-byte
# little-endian length and its bytes. Variables as save_checkpoint lists them; a tensor's blocks
# are given as (offset, extent, file): each block's values, a ramp, are appended to its file.
def checkpoint(variables, metadata, shards=1):
    files = [b""] * shards
    listed = []
    counter = 0
    for v in variables:
        e = {k: v[k] for k in ("group", "index", "path", "dtype", "shape")}
        if "value" in v:
            e["value"] = v["value"]
        else:
            e["layout"] = v.get("layout", "(None,)")
            e["blocks"] = []
            for offset, extent, f in v["blocks"]:
                n = 1
                for x in extent:
                    n *= x
                values = struct.pack("<%df" % n, *[(counter + i) / 8 for i in range(n)])
                counter += n
                e["blocks"].append({"file": "shard-%05d.bin" % f, "offset": offset,
                                    "extent": extent, "at": len(files[f]),
                                    "chunks": [zlib.crc32(values[c:c + (1 << 20)])
                                               for c in range(0, len(values), 1 << 20)]})
                files[f] += values
        listed.append(e)
    manifest = {"format": "tessel-checkpoint", "version": 1, "mesh": "batch=%d" % shards,
                "processes": shards,
                "files": {"shard-%05d.bin" % i: len(b) for i, b in enumerate(files)},
                "variables": listed, "metadata": metadata}
    data = json.dumps(manifest, indent=1, sort_keys=True).encode() + b"\0"
    for b in files:
        data += struct.pack("<H", len(b)) + b
    return data

def tensor(group, index, path, shape, blocks):
    return {"group": group, "index": index, "path": path, "dtype": "float32", "shape": shape,
            "blocks": blocks}
def scalar(group, index, path, dtype, value):
    return {"group": group, "index": index, "path": path, "dtype": dtype, "shape": [],
            "value": value}
position = {"epoch": 1, "batch": 0, "data_pass": 1}
T, N, O, M = ("trainable_variables", "non_trainable_variables", "optimizer_variables",
              "metrics_variables")
# A dense layer with Adam on one device (what save_checkpoint writes for input<4>, dense<3>).
dense_adam = [
    tensor(T, 0, "dense/kernel", [4, 3], [([0, 0], [4, 3], 0)]),
    tensor(T, 1, "dense/bias", [3], [([0], [3], 0)]),
    scalar(O, 0, "adam/iteration", "int64", 2),
    scalar(O, 1, "adam/learning_rate", "float64", 0.001),
    tensor(O, 2, "adam/dense_kernel_momentum", [4, 3], [([0, 0], [4, 3], 0)]),
    tensor(O, 3, "adam/dense_kernel_velocity", [4, 3], [([0, 0], [4, 3], 0)]),
    tensor(O, 4, "adam/dense_bias_momentum", [3], [([0], [3], 0)]),
    tensor(O, 5, "adam/dense_bias_velocity", [3], [([0], [3], 0)]),
    scalar(M, 0, "loss/total", "float64", 2.7792444229125977),
    scalar(M, 1, "loss/count", "float64", 8.0),
]
write("checkpoint_manifest", "dense_adam", checkpoint(dense_adam, position))
# Split over two devices by rows, the bias replicated (device 0 writes it, device 1 nothing more).
write("checkpoint_manifest", "rows_two_shards", checkpoint([
    tensor(T, 0, "dense/kernel", [4, 6], [([0, 0], [2, 6], 0), ([2, 0], [2, 6], 1)]),
    tensor(T, 1, "dense/bias", [6], [([0], [6], 0)]),
    scalar(O, 0, "sgd/iteration", "int64", 40)], position, shards=2))
# A 2x2 mesh: a kernel split both ways, a rank-3 tensor split along its last dimension.
write("checkpoint_manifest", "grid_four_shards", checkpoint([
    tensor(T, 0, "conv2d/kernel", [4, 6],
           [([0, 0], [2, 3], 0), ([0, 3], [2, 3], 1), ([2, 0], [2, 3], 2), ([2, 3], [2, 3], 3)]),
    tensor(N, 0, "batch_normalization/moving_mean", [2, 3, 4],
           [([0, 0, 0], [2, 3, 2], 0), ([0, 0, 2], [2, 3, 2], 2)]),
    scalar(M, 0, "accuracy/total", "float64", 12.0)], position, shards=4))
# A tensor with no values, a rank-0 tensor, and float64 values JSON cannot hold.
write("checkpoint_manifest", "edge_values", checkpoint([
    tensor(T, 0, "empty/kernel", [0, 5], [([0, 0], [0, 5], 0)]),
    tensor(T, 1, "scalar/value", [], [([], [], 0)]),
    scalar(M, 0, "loss/total", "float64", "nan"),
    scalar(M, 1, "loss/count", "float64", "inf"),
    scalar(M, 2, "mae/total", "float64", "-inf"),
    scalar(M, 3, "mae/count", "float64", None),
    scalar(O, 0, "seed_generator/state", "int64", -9223372036854775808)], None))
# Damaged: a file outside the directory, a block past its file, overlapping blocks.
def edit(data, change):
    text, rest = data.split(b"\0", 1)
    m = json.loads(text)
    change(m)
    return json.dumps(m, indent=1, sort_keys=True).encode() + b"\0" + rest
base = checkpoint(dense_adam, position)
def escape(m):
    m["files"]["../../etc/passwd"] = 4
    m["variables"][1]["blocks"][0]["file"] = "../../etc/passwd"
write("checkpoint_manifest", "damaged_escape", edit(base, escape))
def past_end(m):
    m["variables"][0]["blocks"][0]["at"] = 18446744073709551615
write("checkpoint_manifest", "damaged_at", edit(base, past_end))
def overlap(m):
    m["variables"][0]["blocks"].append(m["variables"][0]["blocks"][0])
write("checkpoint_manifest", "damaged_overlap", edit(base, overlap))
def extent(m):
    m["variables"][0]["blocks"][0]["extent"] = [4294967296, 4294967296]
    m["variables"][0]["shape"] = [4294967296, 4294967296]
write("checkpoint_manifest", "damaged_extent", edit(base, extent))
write("checkpoint_manifest", "not_json", b'{"format": "tessel-checkpoint", "variables": [')

# checkpoint_metadata: what backup_and_restore writes, and damaged forms.
for i, text in enumerate([
        b'{"batch":3,"data_pass":0,"epoch":0}', b'{"batch":0,"data_pass":12,"epoch":11}',
        b'{"batch":18446744073709551615,"data_pass":1,"epoch":2}', b'{"batch":-1,"data_pass":1,"epoch":2}',
        b'{"batch":1.5,"data_pass":1,"epoch":2}', b'{"batch":"3","data_pass":1,"epoch":2}',
        b'{"batch":1e300,"data_pass":1,"epoch":2}', b'{"data_pass":1,"epoch":2}', b'null', b'[1,2,3]',
        b'{"batch":3,"data_pass":0,"epoch":0']):
    write("checkpoint_metadata", "%02d" % i, text)

# keras_config: a model byte (0 the CNN, 1 the MLP of tests/fuzz/keras_config_*.json), then the
# config.json of Keras's archives (seeds/000-002, Functional) and tessel's own configs.
for name in ("seed000", "seed001", "seed002"):
    with zipfile.ZipFile(os.path.join(golden, name + ".keras")) as z:
        write("keras_config", name, b"\0" + z.read("config.json"))
here = os.path.join(out, "..")
for byte, name in ((0, "functional"), (1, "sequential")):
    with open(os.path.join(here, "keras_config_%s.json" % name), "rb") as f:
        write("keras_config", "tessel_" + name, bytes([byte]) + f.read())

# zip: small archives as Keras writes them (stored) and recompressed (DEFLATE), with a comment,
# an empty one, a ZIP64 one, and Keras's seeds/002 archive recompressed.
with zipfile.ZipFile(os.path.join(golden, "seed000.keras")) as z:
    config = z.read("config.json")
    metadata = z.read("metadata.json")
weights = bytes(range(256)) * 4 + bytes(512)
def archive(method, comment=b"", force_zip64=False, entries=None):
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", method) as z:
        for name, data in entries or (("metadata.json", metadata), ("config.json", config),
                                      ("model.weights.h5", weights)):
            info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
            info.compress_type = method
            with z.open(info, "w", force_zip64=force_zip64) as f:
                f.write(data)
        z.comment = comment
    return b.getvalue()
write("zip", "stored", archive(zipfile.ZIP_STORED))
write("zip", "deflated", archive(zipfile.ZIP_DEFLATED))
write("zip", "comment", archive(zipfile.ZIP_STORED, comment=b"a comment"))
write("zip", "empty", archive(zipfile.ZIP_STORED, entries=[]))
write("zip", "zip64", archive(zipfile.ZIP_STORED, force_zip64=True,
                              entries=[("metadata.json", metadata)]))
write("zip", "zeros_deflated", archive(zipfile.ZIP_DEFLATED, entries=[("zeros", bytes(65536))]))
with open(os.path.join(golden, "seed002.deflated.keras"), "rb") as f:
    write("zip", "seed002_deflated", f.read())

# weights_precheck: a mode byte (0 as is, 1 with a CRC-32 trailer appended by the harness, 2 that
# and a bit flipped at the place of the 3 bytes after it), then the file. Keras's smallest
# weights file, that file with tessel's trailer, and small files of each superblock version
# (0-3) whose end-of-file address is their size.
with open(os.path.join(golden, "rmsprop_mlp.weights.h5"), "rb") as f:
    keras = f.read()
def trailer(b):
    return b + b"TSLCRC32" + struct.pack("<QII", len(b), zlib.crc32(b), 0)
def superblock(version, offsets, size):
    sig = b"\x89HDF\r\n\x1a\n"
    addr = lambda v: v.to_bytes(offsets, "little")
    undefined = b"\xff" * offsets
    if version <= 1:
        head = sig + bytes([version, 0, 0, 0, 0, offsets, 8, 0]) + struct.pack("<HHI", 4, 16, 0)
        if version == 1:
            head += struct.pack("<HH", 32, 0)
        head += addr(0) + undefined + addr(size) + undefined
    else:
        head = sig + bytes([version, offsets, 8, 0]) + addr(0) + undefined + addr(size) + addr(48)
        head += struct.pack("<I", zlib.crc32(head))
    return head + bytes(size - len(head))
write("weights_precheck", "keras", b"\0" + keras)
write("weights_precheck", "keras_trailer", b"\0" + trailer(keras))
write("weights_precheck", "keras_harness_trailer", b"\1" + keras)
write("weights_precheck", "keras_flipped", b"\2\x40\0\3" + keras)
for version in range(4):
    for offsets in (2, 4, 8):
        write("weights_precheck", "v%d_o%d" % (version, offsets),
              b"\1" + superblock(version, offsets, 128))
write("weights_precheck", "v0_truncated", b"\0" + superblock(0, 8, 128)[:100])
write("weights_precheck", "not_hdf5", b"\0" + config[:200])
# weights_index: the .weights.json the harness's own shards (m_00000..2.weights.h5) come with, as
# save_weights writes it, compact, reordered, and without a shard.
shards = ["m_00000.weights.h5", "m_00001.weights.h5", "m_00002.weights.h5"]
index = {"metadata": {"total_size": 2552.0},
         "weight_map": {"/layers/dense/vars": shards[:1], "/layers/dense_1/vars": shards[:1],
                        "/optimizer/vars": shards}}
write("weights_index", "saved", json.dumps(index, indent=4).encode())
write("weights_index", "compact", json.dumps(index).encode())
index["weight_map"]["/optimizer/vars"] = list(reversed(shards))
write("weights_index", "reordered", json.dumps(index).encode())
index["weight_map"]["/optimizer/vars"] = shards[:2]
write("weights_index", "missing_shard", json.dumps(index).encode())
index["weight_map"]["/optimizer/vars"] = [shards[0], 1]
write("weights_index", "not_a_name", json.dumps(index).encode())
# With the shards' sums a save records: "$SUMS" (which the harness replaces by its own shards'
# sums, as their bytes change with libhdf5's timestamps), sums of other shards, of one shard
# alone, and sums that are not numbers.
index["weight_map"]["/optimizer/vars"] = shards
write("weights_index", "sums", (json.dumps(index)[:-1] + ', "tessel_shards": $SUMS}').encode())
index["tessel_shards"] = {s: {"bytes": 100, "crc32": 7} for s in shards}
write("weights_index", "other_sums", json.dumps(index).encode())
index["tessel_shards"] = {shards[0]: {"bytes": 100, "crc32": 7}}
write("weights_index", "one_sum", json.dumps(index).encode())
index["tessel_shards"] = {s: {"bytes": -1, "crc32": "x"} for s in shards}
write("weights_index", "bad_sums", json.dumps(index).encode())
index["tessel_shards"] = 3
write("weights_index", "sums_not_an_object", json.dumps(index).encode())
EOF
# --- ps_server, ps_worker: real messages of a parameter-server job, and what its chief reads
# (make_ps_corpus.py; the keys seed is made by tessel-ps-keys, TESSEL_PS_KEYS_PROGRAM or the
# build's).
python3 "$here/make_ps_corpus.py" "$out" "${TESSEL_PS_KEYS_PROGRAM:-$here/../../build/tessel-ps-keys}"

echo "seeds: $(find "$out" -type f | wc -l) files in $out"
