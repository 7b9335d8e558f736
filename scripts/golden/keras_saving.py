#!/usr/bin/env python3
"""Keras 3's side of tessel's .weights.h5 round trips (tests/unit/saving_test.cpp).

Two steps, both writing into tests/golden/saving/:

1. Keras writes (the default):

       KERAS_BACKEND=jax JAX_PLATFORMS=cpu /work/keras-venv/bin/python scripts/golden/keras_saving.py

   builds each model below with fixed weights, trains two batches with its optimizer (Adam for the
   seeds' models), and writes `<model>.weights.h5` (model.save_weights) and `<model>.json`: the
   training batches, the evaluation inputs, Keras's predictions on them, the optimizer's
   iteration count, the next batch and Keras's predictions after training on it (models without
   Dropout, whose training step is random). tessel loads the file and must predict the same.

2. Keras reads what tessel wrote:

       TESSEL_SAVING_GOLDEN_OUT=/tmp/tessel_saving build/tests/unit_tests "[saving][golden]"
       KERAS_BACKEND=jax JAX_PLATFORMS=cpu /work/keras-venv/bin/python scripts/golden/keras_saving.py \\
           --from-tessel /tmp/tessel_saving

   The unit test loads each `<model>.weights.h5`, trains the same two batches again in tessel and
   saves `<dir>/<model>.weights.h5`; this step loads those files into the same Keras models
   (model.load_weights, optimizer state included) and writes `keras_loads_tessel_<model>.json`:
   Keras's predictions on the evaluation inputs, its optimizer's iteration count, and its
   predictions after training on the next batch, which the test compares with tessel's.

The seeds' models (ARCHIVED) also go both ways as a .keras archive (model.save /
keras.saving.load_model) and as sharded weights (save_weights with a max_shard_size of 128 KiB to 1 MiB, a
`.weights.json` and `<model>_0000N.weights.h5` shards): step 1 writes `<model>.keras`,
`<model>.weights.json` and its shards (the trained weights in a freshly compiled model, whose
optimizer has no state yet: small files); step 2 loads tessel's `<dir>/<model>.keras` and
`<dir>/<model>.weights.json` and writes `keras_loads_tessel_<model>_archive.json`.

Everything under tests/golden/saving/ comes from this script (the .h5, .keras and
.weights.json files from step 1 and each other JSON file from its step); nothing is edited by
hand. JSON conventions are
tests/golden/README.md's (arrays as {shape, data}, float32 as the shortest round-trip decimal).
"""

import argparse
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "golden", "saving")
sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))

import numpy as np  # noqa: E402

# The JSON writer and the seeds/002 model of the other golden files.
from make_golden import _dump, arr, build_seed002_cnn, iarr  # noqa: E402


def write_json(name, obj):
    out = []
    _dump(obj, out, 1, 0)
    text = "".join(out) + "\n"
    import json

    json.loads(text)
    with open(os.path.join(OUT, name), "w") as f:
        f.write(text)
    print(f"wrote {name} ({len(text.encode())} bytes)")


def meta(keras, jax, note):
    return {
        "generator": "scripts/golden/keras_saving.py",
        "keras_version": keras.__version__,
        "jax_version": jax.__version__,
        "numpy_version": np.__version__,
        "backend": keras.backend.backend(),
        "device": "cpu",
        "array_format": "{shape: [..], data: [flat row-major]}",
        "float_format": "float32, shortest round-trip decimal",
        "note": note,
    }


# --------------------------------------------------------------------------------------
# The models: the seeds' (functional, as the seeds write them) and a small RMSprop one, whose
# slots Keras orders by kind (every velocity, then every momentum, then every average gradient).
# --------------------------------------------------------------------------------------


def seed000(keras):
    """seeds/000's DataParallel model, compiled with Adam (the seed's loss, mse)."""
    layers = keras.layers
    inputs = layers.Input(shape=(28, 28, 1))
    y = layers.Flatten()(inputs)
    y = layers.Dense(units=200, use_bias=False, activation="relu")(y)
    y = layers.Dropout(0.4)(y)
    y = layers.Dense(units=10, activation="softmax")(y)
    model = keras.Model(inputs=inputs, outputs=y)
    model.compile(optimizer=keras.optimizers.Adam(), loss="mse")
    return model


def seed001(keras):
    """seeds/001's get_compiled_model()."""
    inputs = keras.Input(shape=(784,))
    x = keras.layers.Dense(256, activation="relu")(inputs)
    x = keras.layers.Dense(256, activation="relu")(x)
    outputs = keras.layers.Dense(10)(x)
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
    return model


def seed002(keras):
    """seeds/002's CNN without Dropout, Adam(1e-3) and the seed's loss."""
    model = build_seed002_cnn(keras, dropout=False)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def rmsprop_mlp(keras):
    """A small Sequential model under RMSprop with every slot (momentum, centered)."""
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(5, activation="relu"),
            keras.layers.Dense(4, activation="tanh"),
            keras.layers.Dense(3),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=0.01, momentum=0.5, centered=True),
        loss="mse",
    )
    return model


# name: (builder, input shape, target kind, has dropout, data seed)
MODELS = {
    "seed000": (seed000, (28, 28, 1), "onehot", True, 250),
    "seed001": (seed001, (784,), "labels", False, 251),
    "seed002": (seed002, (28, 28, 1), "labels", False, 252),
    "rmsprop_mlp": (rmsprop_mlp, (6,), "values3", False, 253),
}
BATCH = 8
EVAL = 4


def data(name):
    _, shape, kind, _, seed = MODELS[name]
    rng = np.random.default_rng(seed)
    scale = 255.0 if name == "seed002" else 1.0  # the CNN rescales pixels by 1/255 itself

    def x(n):
        return (rng.random((n,) + shape) * scale).astype(np.float32)

    def y(n):
        if kind == "labels":
            return rng.integers(0, 10, size=(n,)).astype(np.int64)
        if kind == "onehot":
            return np.eye(10, dtype=np.float32)[rng.integers(0, 10, size=(n,))]
        return rng.normal(size=(n, 3)).astype(np.float32)

    d = {}
    for k in ("x1", "x2", "x_next", "x_eval"):
        d[k] = x(EVAL if k == "x_eval" else BATCH)
    for k in ("y1", "y2", "y_next"):
        d[k] = y(BATCH)
    return d


def fixed_weights(model, seed):
    """Weights from a fixed generator (Keras's initializers aside), moving variances positive."""
    rng = np.random.default_rng(seed)
    for v in model.weights:
        shape = tuple(v.shape)
        if "moving_variance" in v.path:
            value = 0.5 + rng.random(shape)
        elif "moving_mean" in v.path:
            value = rng.normal(size=shape) * 0.1
        else:
            fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else 10
            value = rng.normal(size=shape) * np.sqrt(2.0 / fan_in)
        v.assign(value.astype(np.float32))


def yarr(y):
    return iarr(y) if y.dtype.kind in "iu" else arr(y)


def keras_writes(keras, jax, names):
    for name in names:
        build, _, _, dropout, seed = MODELS[name]
        keras.backend.clear_session()
        keras.utils.set_random_seed(0)
        model = build(keras)
        fixed_weights(model, seed + 1000)
        d = data(name)
        model.train_on_batch(d["x1"], d["y1"])
        model.train_on_batch(d["x2"], d["y2"])
        model.save_weights(os.path.join(OUT, f"{name}.weights.h5"))
        if name in ARCHIVED:
            keras_writes_archive(keras, name, model)
        out = {
            "meta": meta(
                keras,
                jax,
                f"{name}: fixed weights, two train_on_batch steps (x1, y1), (x2, y2), then "
                f"save_weights to {name}.weights.h5; predictions = model.predict(x_eval); "
                "after_next_step: predict(x_eval) after train_on_batch(x_next, y_next) "
                "(models without Dropout)",
            ),
            "iterations": int(np.asarray(model.optimizer.iterations)),
        }
        for k, v in d.items():
            out[k] = yarr(v) if k.startswith("y") else arr(v)
        out["predictions"] = arr(model.predict(d["x_eval"], verbose=0))
        if not dropout:
            model.train_on_batch(d["x_next"], d["y_next"])
            out["after_next_step"] = arr(model.predict(d["x_eval"], verbose=0))
        write_json(f"{name}.json", out)


# The seeds' models also go to a .keras archive and to sharded weights. Their optimizers are
# left out (a fresh compiled model takes the trained weights), so that the files stay small; the
# .weights.h5 files above hold the optimizer's state.
ARCHIVED = ("seed000", "seed001", "seed002")
# max_shard_size in KiB: just above each model's largest variable, so two shards or more.
SHARD_KIB = {"seed000": 615, "seed001": 1024, "seed002": 128}


def keras_writes_archive(keras, name, model):
    build = MODELS[name][0]
    light = build(keras)
    light.set_weights(model.get_weights())
    light.save(os.path.join(OUT, f"{name}.keras"))
    light.save_weights(os.path.join(OUT, f"{name}.weights.json"), max_shard_size=SHARD_KIB[name] / 1024**2)
    if name in DEFLATED:
        deflate_archive(name)
    for f in sorted(os.listdir(OUT)):
        if f.startswith(f"{name}.") or f.startswith(f"{name}_0"):
            print(f"  {f} ({os.path.getsize(os.path.join(OUT, f))} bytes)")


# The archives recompressed with DEFLATE, as other zip tools may leave a .keras file (Keras writes
# ZIP_STORED entries; tessel's reader inflates DEFLATE ones too).
DEFLATED = ("seed002",)


def deflate_archive(name):
    """<name>.deflated.keras: <name>.keras's entries, in its order, with its names, times and
    attributes, each compressed with ZIP_DEFLATED (zlib's default level). The same input gives
    the same bytes."""
    import zipfile

    src = os.path.join(OUT, f"{name}.keras")
    dst = os.path.join(OUT, f"{name}.deflated.keras")
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            out = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            out.external_attr = info.external_attr
            out.create_system = info.create_system
            out.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(out, zin.read(info))
    with zipfile.ZipFile(dst) as z:
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist())
        assert z.testzip() is None
    print(f"  {name}.deflated.keras ({os.path.getsize(dst)} bytes, {name}.keras "
          f"{os.path.getsize(src)})")


def keras_reads_archive(keras, jax, name, tessel_dir):
    """Keras loads tessel's .keras archive (load_model) and sharded weights of the model."""
    d = data(name)
    keras.backend.clear_session()
    loaded = keras.saving.load_model(os.path.join(tessel_dir, f"{name}.keras"))
    build = MODELS[name][0]
    sharded = build(keras)
    sharded.load_weights(os.path.join(tessel_dir, f"{name}.weights.json"))
    out = {
        "meta": meta(
            keras,
            jax,
            f"{name}: Keras loads tessel's {name}.keras (keras.saving.load_model) and "
            f"{name}.weights.json (load_weights into the model built here), the Keras file "
            "trained on (x1, y1) and (x2, y2) in tessel; predictions of each on x_eval",
        ),
        "load_model_class": type(loaded).__name__,
        "load_model_layers": [type(l).__name__ for l in loaded.layers],
        "load_model_optimizer": type(loaded.optimizer).__name__ if loaded.optimizer else None,
        "load_model_predictions": arr(loaded.predict(d["x_eval"], verbose=0)),
        "sharded_predictions": arr(sharded.predict(d["x_eval"], verbose=0)),
    }
    write_json(f"keras_loads_tessel_{name}_archive.json", out)


def keras_reads(keras, jax, names, tessel_dir):
    for name in names:
        build, _, _, dropout, _ = MODELS[name]
        path = os.path.join(tessel_dir, f"{name}.weights.h5")
        keras.backend.clear_session()
        keras.utils.set_random_seed(0)
        model = build(keras)
        # Keras loads the optimizer's variables only once it is built (as after a step).
        model.optimizer.build(model.trainable_variables)
        model.load_weights(path)
        d = data(name)
        out = {
            "meta": meta(
                keras,
                jax,
                f"{name}: Keras loads the file tessel's saving test writes (the Keras file "
                "loaded, trained on (x1, y1) and (x2, y2) in tessel, saved); predictions = "
                "predict(x_eval), iterations = the loaded optimizer's; after_next_step: "
                "predict(x_eval) after Keras's train_on_batch(x_next, y_next)",
            ),
            "iterations": int(np.asarray(model.optimizer.iterations)),
            "predictions": arr(model.predict(d["x_eval"], verbose=0)),
        }
        if not dropout:
            model.train_on_batch(d["x_next"], d["y_next"])
            out["after_next_step"] = arr(model.predict(d["x_eval"], verbose=0))
        write_json(f"keras_loads_tessel_{name}.json", out)
        if name in ARCHIVED:
            keras_reads_archive(keras, jax, name, tessel_dir)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--from-tessel", metavar="DIR",
                   help="load the files tessel wrote in DIR into Keras (step 2)")
    p.add_argument("--only", help="comma-separated model names (default: all)")
    p.add_argument("--deflate", action="store_true",
                   help="only recompress the committed <model>.keras archives of DEFLATED into "
                        "<model>.deflated.keras (step 1 does it too)")
    args = p.parse_args()
    names = args.only.split(",") if args.only else list(MODELS)
    if args.deflate:
        for name in names:
            if name in DEFLATED:
                deflate_archive(name)
        return
    import jax
    import keras

    os.makedirs(OUT, exist_ok=True)
    if args.from_tessel:
        keras_reads(keras, jax, names, args.from_tessel)
    else:
        keras_writes(keras, jax, names)


if __name__ == "__main__":
    main()
