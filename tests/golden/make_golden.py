#!/usr/bin/env python3
"""Writes the Keras 3 reference ("golden") values that tessel's C++ tests compare against.

Run (from anywhere; the files are written next to this script):

    KERAS_BACKEND=jax JAX_PLATFORMS=cpu /work/keras-venv/bin/python tests/golden/make_golden.py

See README.md beside this file for the venv, the versions used and the schema of every file.

JSON conventions (all files):
  * an array is {"shape": [d0, d1, ...], "data": [flat row-major values]};
  * float values are float32, printed as the shortest decimal that round-trips to the same
    float32 (numpy's str(np.float32(v))); parse with strtof (or strtod then cast);
  * integer arrays (labels) hold plain JSON integers;
  * every file has a "meta" object with the versions and conventions.
"""

import argparse
import io
import json
import os
import re
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

HERE = os.path.dirname(os.path.abspath(__file__))

# The summary width depends on the terminal size (shutil.get_terminal_size(): COLUMNS, else
# the tty, else 80).  Fix it before keras/rich read it: with 120 columns Keras uses its own
# default widths (88 for sequential-like models, 108 for others).
SUMMARY_COLUMNS = 120

import numpy as np  # noqa: E402


# --------------------------------------------------------------------------------------
# JSON writing
# --------------------------------------------------------------------------------------


class F32:
    """A float32 value to be printed as its shortest round-trip decimal."""

    __slots__ = ("v",)

    def __init__(self, v):
        self.v = np.float32(v)


def arr(a, dtype=np.float32):
    a = np.asarray(a)
    if dtype is np.float32:
        a = a.astype(np.float32)
        data = [F32(v) for v in a.reshape(-1)]
    else:
        a = a.astype(np.int64)
        data = [int(v) for v in a.reshape(-1)]
    return {"shape": list(a.shape), "data": data}


def iarr(a):
    return arr(a, dtype=np.int64)


def _fmt_f32(v):
    if not np.isfinite(v):
        raise ValueError(f"non-finite value {v} cannot be written to JSON")
    s = str(np.float32(v))
    assert np.float32(s) == v, (s, v)
    return s


def _dump(o, out, indent, level):
    pad = " " * (indent * (level + 1))
    end = " " * (indent * level)
    if isinstance(o, F32):
        out.append(_fmt_f32(o.v))
    elif isinstance(o, (np.floating,)):
        out.append(_fmt_f32(np.float32(o)))
    elif isinstance(o, bool) or o is None:
        out.append(json.dumps(o))
    elif isinstance(o, (int, np.integer)):
        out.append(str(int(o)))
    elif isinstance(o, float):
        out.append(repr(o))
    elif isinstance(o, str):
        out.append(json.dumps(o))
    elif isinstance(o, dict):
        # Arrays on one line; other objects one key a line.
        if set(o.keys()) == {"shape", "data"}:
            out.append('{"shape": ' + json.dumps(o["shape"]) + ', "data": [')
            parts = []
            for v in o["data"]:
                sub = []
                _dump(v, sub, 0, 0)
                parts.append("".join(sub))
            out.append(", ".join(parts) + "]}")
            return
        if not o:
            out.append("{}")
            return
        out.append("{\n")
        items = list(o.items())
        for i, (k, v) in enumerate(items):
            out.append(pad + json.dumps(k) + ": ")
            _dump(v, out, indent, level + 1)
            out.append(",\n" if i + 1 < len(items) else "\n")
        out.append(end + "}")
    elif isinstance(o, (list, tuple)):
        if not o:
            out.append("[]")
            return
        if all(isinstance(v, (F32, int, float, str, np.floating, np.integer)) for v in o):
            parts = []
            for v in o:
                sub = []
                _dump(v, sub, 0, 0)
                parts.append("".join(sub))
            out.append("[" + ", ".join(parts) + "]")
            return
        out.append("[\n")
        for i, v in enumerate(o):
            out.append(pad)
            _dump(v, out, indent, level + 1)
            out.append(",\n" if i + 1 < len(o) else "\n")
        out.append(end + "]")
    else:
        raise TypeError(f"cannot write {type(o)}")


def write_json(name, obj, max_bytes=200_000):
    out = []
    _dump(obj, out, 1, 0)
    text = "".join(out) + "\n"
    json.loads(text)  # must be valid JSON
    path = os.path.join(HERE, name)
    with open(path, "w") as f:
        f.write(text)
    size = len(text.encode())
    assert size < max_bytes, (name, size)
    print(f"wrote {name} ({size} bytes)")


# --------------------------------------------------------------------------------------
# Keras helpers
# --------------------------------------------------------------------------------------


def meta(keras, jax, note=""):
    m = {
        "generator": "tests/golden/make_golden.py",
        "keras_version": keras.__version__,
        "jax_version": jax.__version__,
        "numpy_version": np.__version__,
        "backend": keras.backend.backend(),
        "device": "cpu",
        "floatx": keras.backend.floatx(),
        "epsilon": keras.backend.epsilon(),
        "array_format": "{shape: [..], data: [flat row-major]}",
        "float_format": "float32, shortest round-trip decimal",
    }
    if note:
        m["note"] = note
    return m


def f32(a):
    return np.asarray(a, dtype=np.float32)


# --------------------------------------------------------------------------------------
# 1. layers.json
# --------------------------------------------------------------------------------------


def make_layers(keras, jax):
    import jax.numpy as jnp

    rng = np.random.default_rng(1001)
    x = f32(rng.normal(size=(4, 5)))
    kernel = f32(rng.normal(size=(5, 3)))
    bias = f32(rng.normal(size=(3,)))
    dy = f32(rng.normal(size=(4, 3)))

    dense_cases = []
    for activation, use_bias in [
        ("linear", True),
        ("relu", True),
        ("softmax", True),
        ("sigmoid", True),
        ("tanh", True),
        ("relu", False),
    ]:
        layer = keras.layers.Dense(3, activation=activation, use_bias=use_bias)
        layer.build((None, 5))
        layer.set_weights([kernel, bias] if use_bias else [kernel])
        y = np.asarray(layer(x))

        def loss_fn(weights, xx, layer=layer):
            out, _ = layer.stateless_call(weights, [], xx)
            return jnp.sum(out * dy)

        weights = [jnp.asarray(kernel)] + ([jnp.asarray(bias)] if use_bias else [])
        gw, gx = jax.grad(loss_fn, argnums=(0, 1))(weights, jnp.asarray(x))
        case = {"activation": activation, "use_bias": use_bias, "y": arr(y), "dkernel": arr(gw[0])}
        if use_bias:
            case["dbias"] = arr(gw[1])
        case["dx"] = arr(gx)
        dense_cases.append(case)

    # Element-wise / softmax activation layers on x (4, 6).
    xa = f32(rng.normal(size=(4, 6)))
    assert np.all(np.abs(xa) > 1e-3)
    dya = f32(rng.normal(size=(4, 6)))
    act_cases = []
    act_layers = [
        ({"layer": "ReLU"}, keras.layers.ReLU()),
        ({"layer": "Softmax", "axis": -1}, keras.layers.Softmax(axis=-1)),
    ] + [
        ({"layer": "Activation", "activation": a}, keras.layers.Activation(a))
        for a in ["linear", "relu", "softmax", "sigmoid", "tanh"]
    ]
    for desc, layer in act_layers:
        y = np.asarray(layer(xa))

        def loss_fn(xx, layer=layer):
            return jnp.sum(layer(xx) * dya)

        gx = jax.grad(loss_fn)(jnp.asarray(xa))
        act_cases.append(dict(desc, y=arr(y), dx=arr(gx)))

    # Rescaling.
    xr = f32(rng.normal(size=(3, 4)) * 100.0)
    dyr = f32(rng.normal(size=(3, 4)))
    resc_cases = []
    for scale, offset, scale_text in [(1.0 / 255, 0.0, "1/255"), (2.0, -1.0, "2.0")]:
        layer = keras.layers.Rescaling(scale=scale, offset=offset)
        y = np.asarray(layer(xr))

        def loss_fn(xx, layer=layer):
            return jnp.sum(layer(xx) * dyr)

        gx = jax.grad(loss_fn)(jnp.asarray(xr))
        resc_cases.append(
            {
                "scale": F32(scale),
                "scale_text": scale_text,
                "offset": F32(offset),
                "y": arr(y),
                "dx": arr(gx),
            }
        )

    # Flatten.
    xf = f32(rng.normal(size=(2, 3, 4)))
    yf = np.asarray(keras.layers.Flatten()(xf))
    assert yf.shape == (2, 12)

    # Dropout.
    xd = f32(rng.normal(size=(4, 5)))
    drop = keras.layers.Dropout(0.4, seed=7)
    yd_inf = np.asarray(drop(xd, training=False))
    yd_tr = np.asarray(drop(xd, training=True))
    scaled = xd / np.float32(1.0 - 0.4)
    zero_or_scaled = bool(
        np.all((yd_tr == 0) | np.isclose(yd_tr, scaled, rtol=1e-6, atol=0))
    )
    assert np.array_equal(yd_inf, xd)
    assert zero_or_scaled

    return {
        "meta": meta(
            keras,
            jax,
            "Gradients are of L = sum(y * dy) (dy given per case group), computed with "
            "jax.grad through the Keras layer (Dense via stateless_call).",
        ),
        "dense": {
            "units": 3,
            "x": arr(x),
            "kernel": arr(kernel),
            "bias": arr(bias),
            "dy": arr(dy),
            "cases": dense_cases,
        },
        "activations": {"x": arr(xa), "dy": arr(dya), "cases": act_cases},
        "rescaling": {"x": arr(xr), "dy": arr(dyr), "cases": resc_cases},
        "flatten": {"x": arr(xf), "y": arr(yf)},
        "dropout": {
            "rate": 0.4,
            "x": arr(xd),
            "y_training_false": arr(yd_inf),
            "training_true_every_value_is_zero_or_x_over_1_minus_rate": zero_or_scaled,
            "training_true_kept_scale": F32(1.0 / (1.0 - 0.4)),
        },
    }


# --------------------------------------------------------------------------------------
# 2. losses.json
# --------------------------------------------------------------------------------------


def make_losses(keras, jax):
    import jax.numpy as jnp

    rng = np.random.default_rng(2002)

    def softmax(z):
        return np.asarray(jax.nn.softmax(jnp.asarray(f32(z)), axis=-1))

    cases = []

    def add(name, loss_obj, y_true, y_pred, label_kind, description):
        y_pred = f32(y_pred)
        yt = jnp.asarray(y_true)
        if label_kind == "float":
            yt = jnp.asarray(f32(y_true))

        def fn(p):
            return loss_obj(yt, p)

        value, grad = jax.value_and_grad(fn)(jnp.asarray(y_pred))
        cfg = loss_obj.get_config()
        case = {
            "name": name,
            "loss": type(loss_obj).__name__,
            "from_logits": cfg.get("from_logits"),
            "reduction": cfg.get("reduction"),
            "description": description,
            "y_true": iarr(y_true) if label_kind == "int" else arr(y_true),
            "y_pred": arr(y_pred),
            "loss_value": F32(value),
            "grad_y_pred": arr(grad),
        }
        cases.append(case)

    # MSE.
    add(
        "mse",
        keras.losses.MeanSquaredError(),
        f32(rng.normal(size=(4, 3))),
        f32(rng.normal(size=(4, 3))),
        "float",
        "mean over the last axis, then sum_over_batch_size = mean over the batch",
    )

    labels = np.array([0, 2, 1, 2], dtype=np.int32)
    logits = f32(rng.normal(size=(4, 3)) * 1.5)
    add(
        "scce_logits",
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        labels,
        logits,
        "int",
        "log_softmax of the logits; no clipping",
    )
    probs = softmax(f32(rng.normal(size=(4, 3)) * 1.5))
    add(
        "scce_probs",
        keras.losses.SparseCategoricalCrossentropy(from_logits=False),
        labels,
        probs,
        "int",
        "y_pred = softmax(logits) written as given; Keras divides by the row sum, clips to "
        "[eps, 1-eps] and takes the log",
    )
    tiny = f32(
        [
            [1e-9, 0.6, 0.4 - 1e-9],  # true class 0 has a tiny probability: clipped
            [0.2, 0.3, 0.5],
            [0.1, 0.9, 1e-9],  # tiny probability on a non-true class
            [0.25, 0.25, 0.5],
        ]
    )
    add(
        "scce_probs_tiny",
        keras.losses.SparseCategoricalCrossentropy(from_logits=False),
        np.array([0, 2, 1, 2], dtype=np.int32),
        tiny,
        "int",
        "row 0: the true-class probability 1e-9 is clipped to 1e-7, its loss is -log(1e-7) "
        "and the gradient of the whole row is 0 (clip passes no gradient)",
    )
    unnorm = f32([[0.2, 0.2, 0.2], [1.0, 2.0, 1.0], [0.5, 0.3, 0.1], [3.0, 0.5, 0.5]])
    add(
        "scce_probs_unnormalized",
        keras.losses.SparseCategoricalCrossentropy(from_logits=False),
        np.array([0, 1, 2, 0], dtype=np.int32),
        unnorm,
        "int",
        "rows that do not sum to 1: Keras divides each row by its sum before clipping",
    )

    onehot = np.eye(3, dtype=np.float32)[labels]
    add(
        "cce_probs",
        keras.losses.CategoricalCrossentropy(from_logits=False),
        onehot,
        probs,
        "float",
        "one-hot y_true; y_pred = softmax(logits) written as given",
    )
    add(
        "cce_logits",
        keras.losses.CategoricalCrossentropy(from_logits=True),
        onehot,
        logits,
        "float",
        "one-hot y_true; log_softmax of the logits",
    )
    add(
        "cce_probs_tiny",
        keras.losses.CategoricalCrossentropy(from_logits=False),
        np.eye(3, dtype=np.float32)[[0, 2, 1, 2]],
        tiny,
        "float",
        "same rows as scce_probs_tiny with one-hot labels",
    )

    return {
        "meta": meta(
            keras,
            jax,
            "loss_value is the scalar Keras returns (reduction sum_over_batch_size: sum of "
            "per-sample losses / number of per-sample losses); grad_y_pred = d loss_value / "
            "d y_pred via jax.grad. Probability inputs (from_logits false): p <- p / sum(p, "
            "-1); p <- clip(p, 1e-7, 1 - 1e-7); loss = -sum(t * log p). The division by the "
            "row sum is part of the gradient.",
        ),
        "cases": cases,
    }


# --------------------------------------------------------------------------------------
# 3. optimizers.json
# --------------------------------------------------------------------------------------


def make_optimizers(keras, jax):
    rng = np.random.default_rng(3003)
    w0 = f32(rng.normal(size=(2, 3)))
    grads = [f32(rng.normal(size=(2, 3))) for _ in range(3)]

    specs = [
        ("sgd", keras.optimizers.SGD, {}),
        ("sgd_momentum", keras.optimizers.SGD, {"learning_rate": 0.1, "momentum": 0.9}),
        (
            "sgd_nesterov",
            keras.optimizers.SGD,
            {"learning_rate": 0.1, "momentum": 0.9, "nesterov": True},
        ),
        ("adam", keras.optimizers.Adam, {}),
        ("adam_lr0.01", keras.optimizers.Adam, {"learning_rate": 0.01}),
        ("rmsprop", keras.optimizers.RMSprop, {}),
        ("rmsprop_momentum", keras.optimizers.RMSprop, {"learning_rate": 0.01, "momentum": 0.9}),
        ("rmsprop_centered", keras.optimizers.RMSprop, {"centered": True}),
        ("adam_amsgrad", keras.optimizers.Adam, {"learning_rate": 0.01, "amsgrad": True}),
        ("adamw", keras.optimizers.AdamW, {"learning_rate": 0.01}),
        ("adamw_wd0.1_amsgrad", keras.optimizers.AdamW,
         {"learning_rate": 0.01, "weight_decay": 0.1, "amsgrad": True}),
        ("adamw_excluded", keras.optimizers.AdamW, {"learning_rate": 0.01, "weight_decay": 0.1}),
        ("adagrad", keras.optimizers.Adagrad, {}),
        ("adagrad_lr0.1", keras.optimizers.Adagrad,
         {"learning_rate": 0.1, "initial_accumulator_value": 0.5}),
        ("adamax", keras.optimizers.Adamax, {}),
        ("adamax_lr0.01", keras.optimizers.Adamax, {"learning_rate": 0.01, "beta_1": 0.8}),
        ("lion", keras.optimizers.Lion, {}),
        ("lion_lr0.01", keras.optimizers.Lion,
         {"learning_rate": 0.01, "beta_1": 0.95, "beta_2": 0.98}),
        ("sgd_weight_decay", keras.optimizers.SGD,
         {"learning_rate": 0.1, "momentum": 0.9, "weight_decay": 0.01}),
        ("rmsprop_clipvalue", keras.optimizers.RMSprop, {"clipvalue": 0.5}),
        ("adam_clipvalue_weight_decay", keras.optimizers.Adam,
         {"learning_rate": 0.01, "clipvalue": 0.3, "weight_decay": 0.05}),
        ("nadam", keras.optimizers.Nadam, {}),
        ("nadam_lr0.01", keras.optimizers.Nadam, {"learning_rate": 0.01, "beta_1": 0.8}),
    ]
    # exclude_from_weight_decay(var_names=...) before the first step, by case.
    excluded = {"adamw_excluded": ["w"]}
    keep = ["name", "learning_rate", "momentum", "nesterov", "beta_1", "beta_2", "epsilon",
            "rho", "centered", "amsgrad", "initial_accumulator_value", "weight_decay",
            "clipvalue"]
    cases = []
    for case_name, cls, kwargs in specs:
        opt = cls(**kwargs)
        if case_name in excluded:
            opt.exclude_from_weight_decay(var_names=excluded[case_name])
        var = keras.Variable(w0, name="w")
        steps = []
        for g in grads:
            opt.apply_gradients([(keras.ops.convert_to_tensor(g), var)])
            slots = {}
            scalars = {}
            for v in opt.variables:
                leaf = v.path.split("/")[-1]
                if leaf in ("iteration", "learning_rate"):
                    continue
                if not leaf.startswith("w_"):
                    # the optimizer's own (Nadam's "variable", unnamed: Keras numbers a
                    # second one "variable_1")
                    scalars[re.sub(r"_\d+$", "", leaf)] = F32(np.asarray(v))
                    continue
                slots[leaf[2:]] = arr(np.asarray(v))
            steps.append({"w": arr(np.asarray(var)), "slots": slots, "scalars": scalars})
        cfg = opt.get_config()
        config = {}
        for k in keep:
            if k in cfg:
                val = cfg[k]
                if k == "learning_rate":
                    val = F32(val)
                config[k] = val
        cases.append(
            {
                "case": case_name,
                "class": cls.__name__,
                "constructor_args": {k: v for k, v in kwargs.items()},
                "config": config,
                "exclude_from_weight_decay": excluded.get(case_name, []),
                "steps": steps,
            }
        )

    return {
        "meta": meta(
            keras,
            jax,
            "Each case starts from w0 with a fresh optimizer (exclude_from_weight_decay(var_names="
            "...) called first where the case lists names); step k applies grads[k-1] with "
            "optimizer.apply_gradients and records the variable (w) and the optimizer's slot "
            "variables after the step (slots, keyed by the slot name: Keras names them '<optimizer>/<variable>_<slot>', e.g. 'adam/w_momentum' -> 'momentum').",
        ),
        "w0": arr(w0),
        "grads": [arr(g) for g in grads],
        "cases": cases,
    }


# --------------------------------------------------------------------------------------
# 4. metrics.json
# --------------------------------------------------------------------------------------


def make_metrics(keras, jax):
    rng = np.random.default_rng(4004)
    out = {"meta": meta(keras, jax)}

    preds = f32(rng.normal(size=(6, 4)))
    # argmax of preds is [2, 1, 2, 0, 1, 2]: 4 of these 6 labels match.
    labels = np.array([2, 3, 2, 0, 1, 1], dtype=np.int32)
    assert np.array_equal(np.argmax(preds, -1), [2, 1, 2, 0, 1, 2])
    m = keras.metrics.SparseCategoricalAccuracy()
    m.update_state(labels, preds)
    out["sparse_categorical_accuracy"] = {
        "y_true": iarr(labels),
        "y_pred": arr(preds),
        "argmax_y_pred": iarr(np.argmax(preds, -1)),
        "result": F32(m.result()),
    }

    yt = np.array([1, 2, 3, 4, 0, 2, 2, 1], dtype=np.int32)
    yp = np.array([1, 2, 0, 4, 0, 1, 2, 3], dtype=np.int32)
    m = keras.metrics.Accuracy()
    m.update_state(yt, yp)
    out["accuracy"] = {"y_true": iarr(yt), "y_pred": iarr(yp), "result": F32(m.result())}

    m = keras.metrics.Mean()
    m.update_state(np.array([1.0, 2.0], np.float32))
    after_first = float(m.result())
    m.update_state(np.array([3.0, 4.0], np.float32))
    out["mean"] = {
        "updates": [arr([1.0, 2.0]), arr([3.0, 4.0])],
        "result_after_first_update": F32(after_first),
        "result": F32(m.result()),
    }

    oh = np.eye(4, dtype=np.float32)[labels]
    m = keras.metrics.CategoricalAccuracy()
    m.update_state(oh, preds)
    out["categorical_accuracy"] = {
        "y_true": arr(oh),
        "y_pred": arr(preds),
        "result": F32(m.result()),
    }

    # Ties in argmax: Keras takes the first maximum (numpy/jax argmax).
    tie = f32([[0.5, 0.5, 0.0], [0.2, 0.4, 0.4]])
    m = keras.metrics.SparseCategoricalAccuracy()
    m.update_state(np.array([1, 1], np.int32), tie)
    out["sparse_categorical_accuracy_ties"] = {
        "y_true": iarr([1, 1]),
        "y_pred": arr(tie),
        "result": F32(m.result()),
        "note": "argmax picks the first of equal maxima, so both rows predict the earlier "
        "class (row 0 -> 0, row 1 -> 1)",
    }
    return out


# --------------------------------------------------------------------------------------
# 5. model_step.json
# --------------------------------------------------------------------------------------


def weights_list(model):
    res = []
    for layer in model.layers:
        for v in layer.weights:
            res.append(
                {
                    "path": f"{layer.name}/{v.name}",
                    "keras_path": v.path,
                    "value": arr(np.asarray(v)),
                }
            )
    return res


def make_model_step(keras, jax):
    rng = np.random.default_rng(5005)
    models = []

    def init_weights(shapes):
        ws = []
        for shp in shapes:
            if len(shp) == 2:
                ws.append(f32(rng.normal(size=shp) * np.sqrt(2.0 / shp[0])))
            else:
                ws.append(f32(rng.normal(size=shp) * 0.1))
        return ws

    def run(name, description, build, compile_kwargs, compile_text, x, y, y_is_int):
        keras.backend.clear_session()  # fresh name counters: 'sequential', 'dense', ...
        keras.utils.set_random_seed(0)
        model = build()
        init = [np.asarray(w) for w in build.initial]
        model.set_weights(init)
        model.compile(**compile_kwargs())
        initial = weights_list(model)
        steps = []
        for _ in range(3):
            ret = model.train_on_batch(x, y)
            steps.append(
                {
                    "returned": [F32(r) for r in np.atleast_1d(ret)],
                    "weights": weights_list(model),
                }
            )
        metrics_names = list(model.metrics_names)
        ev = model.evaluate(x, y, batch_size=len(x), verbose=0, return_dict=True)
        names = list(ev.keys())
        pred = model.predict(x, batch_size=len(x), verbose=0)

        # Cross-check: fit with one batch per epoch gives the same per-epoch logs.
        keras.backend.clear_session()
        keras.utils.set_random_seed(0)
        model2 = build()
        model2.set_weights(init)
        model2.compile(**compile_kwargs())
        hist = model2.fit(x, y, batch_size=len(x), epochs=3, shuffle=False, verbose=0)
        fit_final = [np.asarray(w) for w in model2.get_weights()]
        same = all(
            np.allclose(a, b, rtol=1e-6, atol=1e-7)
            for a, b in zip(fit_final, [np.asarray(w) for w in model.get_weights()])
        )
        assert same, name

        layers = []
        for layer in model.layers:
            d = {"name": layer.name, "class": type(layer).__name__}
            cfg = layer.get_config()
            for k in ("units", "activation", "use_bias", "rate"):
                if k in cfg:
                    d[k] = cfg[k]
            layers.append(d)

        models.append(
            {
                "name": name,
                "description": description,
                "input_shape": list(model.inputs[0].shape[1:]),
                "layers": layers,
                "compile": compile_text,
                "x": arr(x),
                "y": iarr(y) if y_is_int else arr(y),
                "initial_weights": initial,
                "returned_names": names,
                "keras_metrics_names": metrics_names,
                "steps": steps,
                "fit_history": {k: [F32(v) for v in vals] for k, vals in hist.history.items()},
                "fit_final_weights_match_train_on_batch": same,
                "evaluate": {k: F32(v) for k, v in ev.items()},
                "predict": arr(pred),
            }
        )

    # A: seeds/001-like MLP, scaled down.
    xa = f32(rng.normal(size=(8, 12)))
    ya = np.array([0, 1, 2, 3, 4, 0, 2, 4], dtype=np.int32)

    def build_a():
        return keras.Sequential(
            [
                keras.Input(shape=(12,)),
                keras.layers.Dense(16, activation="relu", name="dense"),
                keras.layers.Dense(16, activation="relu", name="dense_1"),
                keras.layers.Dense(5, name="dense_2"),
            ]
        )

    build_a.initial = init_weights([(12, 16), (16,), (16, 16), (16,), (16, 5), (5,)])
    run(
        "mlp_adam_scce",
        "seeds/001 shape scaled down: Input(12) -> Dense(16, relu) -> Dense(16, relu) -> "
        "Dense(5) logits",
        build_a,
        lambda: dict(
            optimizer=keras.optimizers.Adam(),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[keras.metrics.SparseCategoricalAccuracy()],
        ),
        "optimizer=Adam(), loss=SparseCategoricalCrossentropy(from_logits=True), "
        "metrics=[SparseCategoricalAccuracy()]",
        xa,
        ya,
        True,
    )

    # B: seeds/000 shape scaled down (no dropout so it is deterministic).
    xb = f32(rng.normal(size=(5, 6, 4)))
    yb = np.eye(3, dtype=np.float32)[[0, 1, 2, 1, 0]]

    def build_b():
        return keras.Sequential(
            [
                keras.Input(shape=(6, 4)),
                keras.layers.Flatten(name="flatten"),
                keras.layers.Dense(7, activation="relu", use_bias=False, name="d1"),
                keras.layers.Dense(3, activation="softmax", name="d2"),
            ]
        )

    build_b.initial = init_weights([(24, 7), (7, 3), (3,)])
    run(
        "seed000_small_sgd_mse",
        "seeds/000 shape scaled down: Input(6,4) -> Flatten -> Dense(7, relu, no bias, d1) -> "
        "Dense(3, softmax, d2); MSE; SGD()",
        build_b,
        lambda: dict(optimizer=keras.optimizers.SGD(), loss="mean_squared_error"),
        "optimizer=SGD(), loss='mean_squared_error' (no metrics: train_on_batch returns the "
        "loss alone)",
        xb,
        yb,
        False,
    )
    # B': the same with compile(loss="mse") alone, as the distribution guide that seeds/000
    # follows writes it: the default optimizer of Model.compile is "rmsprop".
    run(
        "seed000_small_default_optimizer_mse",
        "same model and data as seed000_small_sgd_mse, compiled as compile(loss='mse'): "
        "the default optimizer is RMSprop()",
        build_b,
        lambda: dict(loss="mse"),
        "loss='mse' (optimizer left at its default, 'rmsprop')",
        xb,
        yb,
        False,
    )

    return {
        "meta": meta(
            keras,
            jax,
            "steps[k].returned is what model.train_on_batch(x, y) returned on call k+1, in "
            "the order of returned_names. train_on_batch calls reset_metrics() first (Keras "
            "3.15 has no reset_metrics argument), so the loss is the loss of that single "
            "batch computed in the forward pass, with the weights from BEFORE the update; "
            "the metrics likewise. returned_names are the keys of the same values in "
            "return_dict form; keras_metrics_names is what model.metrics_names says "
            "(['loss', 'compile_metrics'] when compile has metrics). steps[k].weights are the weights after the update. "
            "evaluate/predict use the weights after the 3rd step. fit_history is a fresh "
            "model from the same weights trained with fit(epochs=3, batch_size=len(x), "
            "shuffle=False); it equals steps[*].returned. 'path' is layer_name/variable_name; "
            "'keras_path' is Keras's variable.path (prefixed by the model name).",
        ),
        "models": models,
    }


# --------------------------------------------------------------------------------------
# 6. summaries
# --------------------------------------------------------------------------------------


def write_summary(model, fname):
    """Writes the text of model.summary() to fname (plain text, COLUMNS=SUMMARY_COLUMNS)."""
    chunks = []
    model.summary(print_fn=lambda s, **kw: chunks.append(s))
    text = "".join(chunks)
    with open(os.path.join(HERE, fname), "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {fname} ({len(text.encode())} bytes)")
    return text


def make_summaries(keras, jax):
    from keras.src.utils.summary_utils import readable_memory_size

    def seed001_sequential():
        return keras.Sequential(
            [
                keras.Input(shape=(784,)),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(10),
            ]
        )

    def seed001_functional():
        inputs = keras.Input(shape=(784,))
        h = keras.layers.Dense(256, activation="relu")(inputs)
        h = keras.layers.Dense(256, activation="relu")(h)
        outputs = keras.layers.Dense(10)(h)
        return keras.Model(inputs, outputs)

    def seed000_functional():
        inputs = keras.Input(shape=(28, 28, 1))
        y = keras.layers.Flatten()(inputs)
        y = keras.layers.Dense(units=200, use_bias=False, activation="relu", name="d1")(y)
        y = keras.layers.Dropout(0.4)(y)
        y = keras.layers.Dense(units=10, activation="softmax", name="d2")(y)
        return keras.Model(inputs=inputs, outputs=y)

    def seed000_sequential():
        return keras.Sequential(
            [
                keras.Input(shape=(28, 28, 1)),
                keras.layers.Flatten(),
                keras.layers.Dense(200, activation="relu", use_bias=False, name="d1"),
                keras.layers.Dropout(0.4),
                keras.layers.Dense(10, activation="softmax", name="d2"),
            ]
        )

    variants = [
        ("summary_seed001.txt", "seed001", "Sequential", seed001_sequential),
        ("summary_seed001_functional.txt", "seed001", "Functional", seed001_functional),
        ("summary_seed000.txt", "seed000", "Functional", seed000_functional),
        ("summary_seed000_sequential.txt", "seed000", "Sequential", seed000_sequential),
    ]
    entries = []
    for fname, seed, kind, fn in variants:
        # Fresh name counters, so auto names are those of a fresh Python session.
        keras.backend.clear_session()
        model = fn()
        text = write_summary(model, fname)
        layers = []
        for layer in model.layers:
            n = layer.count_params()
            layers.append(
                {
                    "name": layer.name,
                    "class": type(layer).__name__,
                    "output_shape": [None if d is None else int(d) for d in layer.output.shape],
                    "params": n,
                }
            )
        tr = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
        ntr = sum(int(np.prod(v.shape)) for v in model.non_trainable_weights)
        trb = sum(int(np.prod(v.shape)) * 4 for v in model.trainable_weights)
        ntrb = sum(int(np.prod(v.shape)) * 4 for v in model.non_trainable_weights)
        entries.append(
            {
                "file": fname,
                "seed": seed,
                "built_as": kind,
                "model_name": model.name,
                "layers": layers,
                "total_params": tr + ntr,
                "trainable_params": tr,
                "non_trainable_params": ntr,
                "total_bytes": trb + ntrb,
                "trainable_bytes": trb,
                "non_trainable_bytes": ntrb,
                "total_size_text": readable_memory_size(trb + ntrb),
                "trainable_size_text": readable_memory_size(trb),
                "non_trainable_size_text": readable_memory_size(ntrb),
                "lines": text.split("\n"),
            }
        )
    return {
        "meta": meta(
            keras,
            jax,
            f"Text captured with model.summary(print_fn=...) (plain text, no ANSI styles: "
            f"Keras renders through a rich Console with color_system=None when print_fn is "
            f"given) with COLUMNS={SUMMARY_COLUMNS}, so Keras uses its default line lengths "
            f"(88 for sequential-like models, 108 otherwise; capped at terminal columns - 4). "
            f"Byte sizes count 4 bytes per float32 parameter; size text is Keras's "
            f"readable_memory_size (1024-based units, 2 decimals). 'lines' is the text split "
            f"on newlines (the .txt file holds the same text).",
        ),
        "columns": SUMMARY_COLUMNS,
        "models": entries,
    }


# --------------------------------------------------------------------------------------
# 8. functional.json (+ summary_residual.txt, summary_two_branch.txt)
# --------------------------------------------------------------------------------------


def var_list(model):
    """[{path: variable.path, value}] in model.weights (== model.get_weights()) order."""
    return [{"path": v.path, "value": arr(np.asarray(v))} for v in model.weights]


def make_functional(keras, jax):
    layers = keras.layers

    def build_residual():
        inputs = keras.Input(shape=(16,), name="input_layer")
        h = layers.Dense(32, activation="relu", name="d1")(inputs)
        h = layers.Dense(16, name="d2")(h)
        s = layers.Add(name="add")([inputs, h])
        r = layers.ReLU(name="relu")(s)
        outputs = layers.Dense(4, name="head")(r)
        return keras.Model(inputs, outputs, name="residual")

    def build_two_branch():
        inputs = keras.Input(shape=(12,), name="input_layer")
        a = layers.Dense(8, activation="relu", name="a")(inputs)
        b = layers.Dense(6, activation="tanh", name="b")(inputs)
        c = layers.Concatenate(name="concat")([a, b])
        outputs = layers.Dense(3, name="out")(c)
        return keras.Model(inputs, outputs, name="two_branch")

    def build_inner_residual():
        # The join reads a layer's output that another layer reads too (a fan-out after a
        # layer): its gradient is the sum of the two.
        inputs = keras.Input(shape=(10,), name="input_layer")
        p = layers.Dense(16, activation="tanh", name="pre")(inputs)
        h = layers.Dense(24, activation="relu", name="d1")(p)
        h = layers.Dense(16, name="d2")(h)
        s = layers.Add(name="add")([p, h])
        outputs = layers.Dense(4, name="head")(s)
        return keras.Model(inputs, outputs, name="inner_residual")

    def build_unequal_branches(short_first):
        # Branches of unequal depth meeting in an Add: Keras orders the layers by depth (the
        # longest path to the output), ties broken by the order a depth-first walk from the
        # output first reaches them, so p2 (depth 1) comes after p1a and p1b whichever operand
        # of the Add it is. p2, p1a, p1b and p1c have kernels of one shape.
        inputs = keras.Input(shape=(8,), name="input_layer")
        t = layers.Dense(6, activation="relu", name="trunk")(inputs)
        p2 = layers.Dense(6, name="p2")(t)
        p1 = layers.Dense(6, activation="tanh", name="p1a")(t)
        p1 = layers.Dense(6, activation="relu", name="p1b")(p1)
        p1 = layers.Dense(6, name="p1c")(p1)
        s = layers.Add(name="add")([p2, p1] if short_first else [p1, p2])
        outputs = layers.Dense(3, name="head")(s)
        name = "unequal_branches" if short_first else "unequal_branches_long_first"
        return keras.Model(inputs, outputs, name=name)

    specs = [
        (
            "residual",
            "Input(16, 'input_layer') -> Dense(32, relu, 'd1') -> Dense(16, 'd2'); "
            "Add('add')([input_layer, d2]) -> ReLU('relu') -> Dense(4, 'head') logits",
            build_residual,
            16,
            4,
            8008,
        ),
        (
            "two_branch",
            "Input(12, 'input_layer') -> {Dense(8, relu, 'a'), Dense(6, tanh, 'b')} -> "
            "Concatenate('concat')([a, b]) (8 + 6 = 14 features, a first) -> Dense(3, 'out') "
            "logits",
            build_two_branch,
            12,
            3,
            8009,
        ),
        (
            "inner_residual",
            "Input(10, 'input_layer') -> Dense(16, tanh, 'pre') -> Dense(24, relu, 'd1') -> "
            "Dense(16, 'd2'); Add('add')([pre, d2]) -> Dense(4, 'head') logits (pre's output "
            "read by d1 and add: its gradient sums both)",
            build_inner_residual,
            10,
            4,
            8010,
        ),
        (
            "unequal_branches",
            "Input(8, 'input_layer') -> Dense(6, relu, 'trunk') -> {Dense(6, 'p2'), "
            "Dense(6, tanh, 'p1a') -> Dense(6, relu, 'p1b') -> Dense(6, 'p1c')}; "
            "Add('add')([p2, p1c]) -> Dense(3, 'head') logits (Keras's layer order: trunk, "
            "p1a, p1b, p2, p1c: by depth, then by first reach from the output)",
            lambda: build_unequal_branches(True),
            8,
            3,
            8011,
        ),
        (
            "unequal_branches_long_first",
            "as unequal_branches with Add('add')([p1c, p2])",
            lambda: build_unequal_branches(False),
            8,
            3,
            8012,
        ),
    ]

    models = []
    for name, description, build, n_in, classes, seed in specs:
        keras.utils.set_random_seed(0)
        keras.backend.clear_session()  # fresh name counters
        model = build()
        assert model.name == name
        rng = np.random.default_rng(seed)
        init = []
        for v in model.weights:
            shape = tuple(v.shape)
            if len(shape) == 2:
                init.append(f32(rng.uniform(-0.5, 0.5, size=shape)))  # kernel
            else:
                init.append(f32(rng.uniform(-0.2, 0.2, size=shape)))  # bias
        model.set_weights(init)
        x = f32(rng.normal(size=(8, n_in)))
        y = rng.integers(0, classes, size=(8,)).astype(np.int32)

        summary_file = f"summary_{name}.txt"
        write_summary(model, summary_file)

        initial_outputs = np.asarray(model(x))
        model.compile(
            optimizer=keras.optimizers.Adam(learning_rate=0.01),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
        initial = var_list(model)
        steps = []
        for k in range(3):
            ret = model.train_on_batch(x, y, return_dict=True)
            assert set(ret.keys()) == {"loss", "accuracy"}, ret.keys()
            steps.append(
                {
                    "step": k + 1,
                    "loss": F32(ret["loss"]),
                    "accuracy": F32(ret["accuracy"]),
                    "weights": var_list(model),
                }
            )
        pred = model.predict(x, verbose=0)

        layer_desc = []
        for layer in model.layers:
            d = {"name": layer.name, "class": type(layer).__name__}
            cfg = layer.get_config()
            for key in ("units", "activation", "use_bias", "axis"):
                if key in cfg:
                    d[key] = cfg[key]
            # Inbound layers, in call order (empty for the InputLayer).
            inbound = []
            for node in layer._inbound_nodes:
                for t in node.input_tensors:
                    inbound.append(t._keras_history.operation.name)
            d["inputs"] = inbound
            layer_desc.append(d)

        models.append(
            {
                "name": name,
                "description": description,
                "input_shape": [n_in],
                "classes": classes,
                "layers": layer_desc,
                "compile": "optimizer=Adam(learning_rate=0.01), "
                "loss=SparseCategoricalCrossentropy(from_logits=True), metrics=['accuracy']",
                "rng_seed": seed,
                "summary_file": summary_file,
                "x": arr(x),
                "y": iarr(y),
                "initial_weights": initial,
                "initial_outputs": arr(initial_outputs),
                "steps": steps,
                "predictions": arr(pred),
            }
        )

    return {
        "meta": meta(
            keras,
            jax,
            "Per model: keras.utils.set_random_seed(0), clear_session, build, set_weights "
            "(kernels uniform(-0.5, 0.5), biases uniform(-0.2, 0.2) from "
            "numpy.random.default_rng(rng_seed), in model.weights order; then x (normal) and "
            "y (integers in [0, classes)) from the same rng). initial_outputs = model(x) "
            "before training. steps[k] = model.train_on_batch(x, y, return_dict=True) on call "
            "k+1: loss and accuracy of that batch computed in the forward pass with the "
            "weights from BEFORE the update (train_on_batch resets the metrics first); "
            "'accuracy' with integer labels and (8, classes) logits is sparse categorical "
            "accuracy (argmax of the logits == label). steps[k].weights are after the update. "
            "predictions = model.predict(x) after step 3. Weights are listed in "
            "model.weights / model.get_weights() order; 'path' is Keras's variable.path "
            "(functional models: layer_name/variable_name, no model prefix).",
        ),
        "models": models,
    }


# --------------------------------------------------------------------------------------
# 9. layer_normalization.json
# --------------------------------------------------------------------------------------


def make_layer_normalization(keras, jax):
    import jax.numpy as jnp

    rng = np.random.default_rng(9009)
    default_epsilon = keras.layers.LayerNormalization().epsilon

    cases = []
    for name, shape in [("2d", (5, 7)), ("3d", (2, 3, 4))]:
        x = f32(rng.normal(size=shape))
        n = shape[-1]
        gamma = f32(rng.uniform(0.5, 1.5, size=(n,)))
        beta = f32(rng.uniform(-0.5, 0.5, size=(n,)))
        w = f32(rng.normal(size=shape))

        layer = keras.layers.LayerNormalization()  # axis=-1, epsilon default
        layer.build((None,) + shape[1:])
        assert [v.path.split("/")[-1] for v in layer.weights] == ["gamma", "beta"]
        layer.set_weights([gamma, beta])
        y = np.asarray(layer(x))

        def loss_fn(weights, xx, layer=layer, w=w):
            out, _ = layer.stateless_call(weights, [], xx)
            return jnp.sum(out * w)

        value, (gw, gx) = jax.value_and_grad(loss_fn, argnums=(0, 1))(
            [jnp.asarray(gamma), jnp.asarray(beta)], jnp.asarray(x)
        )
        cfg = layer.get_config()
        cases.append(
            {
                "name": name,
                "axis": cfg["axis"],
                "epsilon": F32(cfg["epsilon"]),
                "center": cfg["center"],
                "scale": cfg["scale"],
                "x": arr(x),
                "gamma": arr(gamma),
                "beta": arr(beta),
                "y": arr(y),
                "w": arr(w),
                "loss": F32(value),
                "dx": arr(gx),
                "dgamma": arr(gw[0]),
                "dbeta": arr(gw[1]),
            }
        )

    return {
        "meta": meta(
            keras,
            jax,
            "keras.layers.LayerNormalization() (axis=-1, default epsilon) with gamma and "
            "beta set explicitly. Keras (JAX backend, ops.layer_normalization): mean = "
            "mean(x, -1); var = mean((x - mean)^2, -1) (biased); inv = rsqrt(var + epsilon) "
            "* gamma; y = x * inv + (beta - mean * inv). loss = sum(y * w); dx, dgamma, "
            "dbeta are its gradients via jax.value_and_grad through layer.stateless_call. "
            "meta.epsilon is backend.epsilon(), NOT the layer's epsilon (keras_default_epsilon).",
        ),
        "keras_default_epsilon": F32(default_epsilon),
        "cases": cases,
    }


# --------------------------------------------------------------------------------------
# 10. binary_crossentropy.json
# --------------------------------------------------------------------------------------


def make_binary_crossentropy(keras, jax):
    import jax.numpy as jnp

    rng = np.random.default_rng(10010)

    def labels(shape):
        return f32(rng.integers(0, 2, size=shape))

    y3 = labels((6, 3))
    p3 = f32(rng.uniform(0.02, 0.98, size=(6, 3)))
    p3[2, 1] = 0.5  # exactly the threshold: BinaryAccuracy predicts 0 (y_pred > threshold)
    y3[2, 1] = 1.0
    z3 = f32(rng.normal(size=(6, 3)) * 2.0)
    y1 = labels((6, 1))
    p1 = f32(rng.uniform(0.02, 0.98, size=(6, 1)))
    z1 = f32(rng.normal(size=(6, 1)) * 2.0)
    # Values outside [eps, 1 - eps] (eps = 1e-7; 1 - eps is float32 0.9999999, so 1 - p there
    # is 1.1920929e-07, not 1e-7) are clipped; the clip passes no gradient.
    yc = f32([[1, 0, 1], [0, 1, 0]])
    pc = f32([[0.0, 1.0, 1e-9], [0.3, 0.9, 0.6]])

    specs = [
        ("probs_6x3", False, y3, p3, "probabilities; y_pred[2][1] == 0.5 exactly (label 1)"),
        ("logits_6x3", True, y3, z3, "logits, same labels as probs_6x3"),
        ("probs_6x1", False, y1, p1, "probabilities, one output per sample"),
        ("logits_6x1", True, y1, z1, "logits, same labels as probs_6x1"),
        (
            "probs_clipped_2x3",
            False,
            yc,
            pc,
            "row 0 is clipped to [1e-7, float32(1 - 1e-7) = 0.9999999]: y_pred 0.0 and 1e-9 "
            "(label 1) become 1e-7 and cost -log(1e-7) = 16.118095; y_pred 1.0 (label 0) "
            "becomes 0.9999999 and costs -log(1 - 0.9999999) = -log(1.1920929e-07) = "
            "15.942385 (not 16.118); the clip passes no gradient, so all three gradients are "
            "0; row 1 is unclipped",
        ),
    ]
    cases = []
    for name, from_logits, yt, yp, description in specs:
        loss_obj = keras.losses.BinaryCrossentropy(from_logits=from_logits)
        ytj = jnp.asarray(yt)

        def fn(p, loss_obj=loss_obj, ytj=ytj):
            return loss_obj(ytj, p)

        value, grad = jax.value_and_grad(fn)(jnp.asarray(yp))
        cfg = loss_obj.get_config()
        case = {
            "name": name,
            "from_logits": cfg["from_logits"],
            "label_smoothing": F32(cfg["label_smoothing"]),
            "reduction": cfg["reduction"],
            "description": description,
            "y_true": arr(yt),
            "y_pred": arr(yp),
            "loss_value": F32(value),
            "grad_y_pred": arr(grad),
        }
        if not from_logits:
            m = keras.metrics.BinaryAccuracy(threshold=0.5)
            m.update_state(yt, yp)
            case["binary_accuracy"] = {
                "threshold": F32(m.threshold),
                "result": F32(m.result()),
            }
        cases.append(case)

    return {
        "meta": meta(
            keras,
            jax,
            "keras.losses.BinaryCrossentropy(from_logits=...) with the default reduction "
            "sum_over_batch_size: per element (JAX backend) probabilities: p = clip(y_pred, "
            "eps, 1 - eps), l = -(t log p + (1 - t) log(1 - p)); logits: l = -t "
            "log_sigmoid(z) - (1 - t) log_sigmoid(-z); per sample mean over the last axis, "
            "then mean over the batch. grad_y_pred = d loss_value / d y_pred (jax.grad). "
            "binary_accuracy: keras.metrics.BinaryAccuracy(threshold=0.5) after one "
            "update_state(y_true, y_pred): mean of (y_pred > threshold) == y_true over all "
            "elements.",
        ),
        "cases": cases,
    }


# --------------------------------------------------------------------------------------
# 11. mean_absolute_error.json
# --------------------------------------------------------------------------------------


def make_mean_absolute_error(keras, jax):
    import jax.numpy as jnp

    rng = np.random.default_rng(11011)
    batches = []
    for shape in [(4, 3), (2, 3)]:
        yt = f32(rng.normal(size=shape))
        yp = f32(rng.normal(size=shape))
        assert np.all(yt != yp)  # no |0| kinks
        batches.append((yt, yp))

    m = keras.metrics.MeanAbsoluteError()
    results = []
    for yt, yp in batches:
        m.update_state(yt, yp)
        results.append(F32(m.result()))

    yt, yp = batches[0]
    loss_obj = keras.losses.MeanAbsoluteError()
    ytj = jnp.asarray(yt)
    value, grad = jax.value_and_grad(lambda p: loss_obj(ytj, p))(jnp.asarray(yp))

    return {
        "meta": meta(
            keras,
            jax,
            "metric: keras.metrics.MeanAbsoluteError(); update_state(y_true, y_pred) once per "
            "batch; results[k] = result() after batch k+1. The metric is a running mean of "
            "the per-sample values mean(|y_true - y_pred|, -1) over all samples seen (4, then "
            "4 + 2 = 6). loss: keras.losses.MeanAbsoluteError() (reduction "
            "sum_over_batch_size) on batch 0; grad_y_pred = d loss_value / d y_pred "
            "(jax.grad) = sign(y_pred - y_true) / (4 * 3). No element has y_true == y_pred.",
        ),
        "metric": {
            "batches": [{"y_true": arr(a), "y_pred": arr(b)} for a, b in batches],
            "results": results,
        },
        "loss": {
            "reduction": loss_obj.get_config()["reduction"],
            "y_true": arr(yt),
            "y_pred": arr(yp),
            "loss_value": F32(value),
            "grad_y_pred": arr(grad),
        },
    }


def small_mlp(keras, rng):
    """Input(5) -> Dense(8, relu) -> Dense(3), its weights drawn from rng (He-like kernels, small
    biases) after x; the model set up as custom_loss and user_optimizer use it."""
    model = keras.Sequential(
        [
            keras.Input(shape=(5,)),
            keras.layers.Dense(8, activation="relu", name="dense"),
            keras.layers.Dense(3, name="dense_1"),
        ]
    )
    model.set_weights([
        f32(rng.normal(size=(5, 8)) * np.sqrt(2.0 / 5)),
        f32(rng.normal(size=(8,)) * 0.1),
        f32(rng.normal(size=(8, 3)) * np.sqrt(2.0 / 8)),
        f32(rng.normal(size=(3,)) * 0.1),
    ])
    return model


def make_custom_loss(keras, jax):
    """A loss and a metric that tessel's library does not have, written by the user in C++
    (tests/unit/custom_loss_test.cpp): Keras's Huber loss and MeanSquaredError metric."""
    import jax.numpy as jnp

    rng = np.random.default_rng(12012)
    yt = f32(rng.normal(size=(6, 3)) * 1.5)
    yp = f32(rng.normal(size=(6, 3)) * 1.5)
    d = np.abs(yp - yt)
    assert np.any(d < 1.0) and np.any(d > 1.0) and np.all(np.abs(d - 1.0) > 1e-3)
    huber = keras.losses.Huber(delta=1.0)
    ytj = jnp.asarray(yt)
    value, grad = jax.value_and_grad(lambda p: huber(ytj, p))(jnp.asarray(yp))

    metric = keras.metrics.MeanSquaredError()
    batches = [(yt[:4], yp[:4]), (yt[4:], yp[4:])]
    results = []
    for a, b in batches:
        metric.update_state(a, b)
        results.append(F32(metric.result()))

    # Three Adam steps of a small regression model with the two.
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    x = f32(rng.normal(size=(8, 5)))
    y = f32(rng.normal(size=(8, 3)) * 2.0)
    model = small_mlp(keras, rng)
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=0.01),
        loss=keras.losses.Huber(delta=1.0),
        metrics=[keras.metrics.MeanSquaredError()],
    )
    initial = weights_list(model)
    steps = []
    for _ in range(3):
        ret = model.train_on_batch(x, y, return_dict=True)
        steps.append(
            {
                "returned": [F32(ret["loss"]), F32(ret["mean_squared_error"])],
                "weights": weights_list(model),
            }
        )
    ev = model.evaluate(x, y, batch_size=len(x), verbose=0, return_dict=True)
    pred = model.predict(x, batch_size=len(x), verbose=0)
    return {
        "meta": meta(
            keras,
            jax,
            "loss: keras.losses.Huber(delta=1.0) (reduction sum_over_batch_size) on y_true, "
            "y_pred (6x3; some |y_pred - y_true| below delta, some above); grad_y_pred = "
            "d loss_value / d y_pred (jax.grad). metric: keras.metrics.MeanSquaredError(), "
            "update_state on rows 0-3 then 4-5; results[k] = result() after batch k+1. model: "
            "Input(5) -> Dense(8, relu) -> Dense(3), compiled with Adam(learning_rate=0.01), "
            "Huber(delta=1.0) and [MeanSquaredError()]; steps[k].returned = train_on_batch's "
            "[loss, mean_squared_error] on call k+1, steps[k].weights after the update; "
            "evaluate and predict after the third step.",
        ),
        "loss": {"delta": 1.0, "y_true": arr(yt), "y_pred": arr(yp), "loss_value": F32(value),
                 "grad_y_pred": arr(grad)},
        "metric": {"batches": [{"y_true": arr(a), "y_pred": arr(b)} for a, b in batches],
                   "results": results},
        "model": {
            "x": arr(x),
            "y": arr(y),
            "initial_weights": initial,
            "returned_names": ["loss", "mean_squared_error"],
            "steps": steps,
            "evaluate": {k: F32(v) for k, v in ev.items()},
            "predict": arr(pred),
        },
    }


def make_user_optimizer(keras, jax):
    """An optimizer the user writes (tests/support/user_optimizers.hpp): Signum, a subclass of
    keras.optimizers.Optimizer here. Three train_on_batch steps of a small MLP under it; the
    weights file after the second step (user_optimizer.weights.h5: tessel loads it and takes the
    third step); the optimizer's config as the model's compile config holds it."""
    from keras import ops

    @keras.saving.register_keras_serializable(package="user")
    class Signum(keras.optimizers.Optimizer):
        def __init__(self, learning_rate=0.01, beta=0.9, name="signum", **kwargs):
            super().__init__(learning_rate=learning_rate, name=name, **kwargs)
            self.beta = beta

        def build(self, var_list):
            if self.built:
                return
            super().build(var_list)
            self.momentums = [self.add_variable_from_reference(v, "momentum") for v in var_list]

        def update_step(self, gradient, variable, learning_rate):
            lr = ops.cast(learning_rate, variable.dtype)
            m = self.momentums[self._get_variable_index(variable)]
            self.assign(m, ops.add(ops.multiply(m, self.beta),
                                   ops.multiply(gradient, 1.0 - self.beta)))
            self.assign_sub(variable, ops.multiply(lr, ops.sign(m)))

        def get_config(self):
            config = super().get_config()
            config.update({"beta": self.beta})
            return config

    rng = np.random.default_rng(6060)
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    x = f32(rng.normal(size=(8, 5)))
    y = f32(rng.normal(size=(8, 3)))
    model = small_mlp(keras, rng)
    model.compile(optimizer=Signum(learning_rate=0.02, beta=0.8), loss="mean_squared_error")
    initial = weights_list(model)
    steps = []
    for k in range(3):
        ret = model.train_on_batch(x, y, return_dict=True)
        steps.append(
            {
                "loss": F32(ret["loss"]),
                "weights": weights_list(model),
                "momentums": [arr(ops.convert_to_numpy(m)) for m in model.optimizer.momentums],
                "iterations": int(ops.convert_to_numpy(model.optimizer.iterations)),
            }
        )
        if k == 1:
            model.save_weights(os.path.join(HERE, "user_optimizer.weights.h5"))
    config = keras.optimizers.serialize(model.optimizer)
    return {
        "meta": meta(
            keras,
            jax,
            "Signum (m = beta m + (1 - beta) g; w -= lr sign(m)), a user's subclass of "
            "keras.optimizers.Optimizer registered as 'user>Signum', learning_rate=0.02, "
            "beta=0.8; Input(5) -> Dense(8, relu) -> Dense(3), mean squared error; steps[k] after "
            "train_on_batch call k+1 (its loss, the weights, the momentum slots, the iteration "
            "count); user_optimizer.weights.h5 saved after the second step; config = "
            "keras.optimizers.serialize(optimizer).",
        ),
        "x": arr(x),
        "y": arr(y),
        "initial_weights": initial,
        "steps": steps,
        "config": config,
    }


def make_schedules(keras, jax):
    """keras.optimizers.schedules (tests/unit/schedules_test.cpp): each schedule's value at steps
    0..40 and its config; an MLP trained under Adam with a warmup CosineDecay (its loss and
    weights per step, the optimizer's variables' paths: no learning_rate), its weights file after
    the second step (schedules.weights.h5) and its serialized optimizer."""
    from keras import ops

    sch = keras.optimizers.schedules
    specs = [
        ("exponential", sch.ExponentialDecay(0.1, decay_steps=7, decay_rate=0.5)),
        ("exponential_staircase",
         sch.ExponentialDecay(0.1, decay_steps=7, decay_rate=0.5, staircase=True)),
        ("inverse_time", sch.InverseTimeDecay(0.1, decay_steps=5, decay_rate=0.5)),
        ("inverse_time_staircase",
         sch.InverseTimeDecay(0.1, decay_steps=5, decay_rate=0.5, staircase=True)),
        ("piecewise", sch.PiecewiseConstantDecay([5, 12], [0.1, 0.05, 0.01])),
        ("polynomial", sch.PolynomialDecay(0.1, decay_steps=20, end_learning_rate=0.01,
                                           power=2.0)),
        ("polynomial_cycle", sch.PolynomialDecay(0.1, decay_steps=8, end_learning_rate=0.01,
                                                 power=0.5, cycle=True)),
        ("cosine", sch.CosineDecay(0.1, decay_steps=20, alpha=0.1)),
        ("cosine_warmup", sch.CosineDecay(0.0, decay_steps=20, alpha=0.05, warmup_target=0.2,
                                          warmup_steps=6)),
    ]
    cases = []
    for name, s in specs:
        cases.append({"case": name, "serialized": keras.optimizers.schedules.serialize(s),
                      "values": [F32(ops.convert_to_numpy(s(step))) for step in range(41)]})

    rng = np.random.default_rng(8080)
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    x = f32(rng.normal(size=(8, 5)))
    y = f32(rng.normal(size=(8, 3)))
    model = small_mlp(keras, rng)
    schedule = sch.CosineDecay(0.001, decay_steps=4, alpha=0.1, warmup_target=0.01,
                               warmup_steps=2)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=schedule),
                  loss="mean_squared_error")
    initial = weights_list(model)
    steps = []
    for k in range(5):
        ret = model.train_on_batch(x, y, return_dict=True)
        steps.append({"loss": F32(ret["loss"]), "weights": weights_list(model),
                      "iterations": int(ops.convert_to_numpy(model.optimizer.iterations)),
                      "learning_rate": F32(ops.convert_to_numpy(model.optimizer.learning_rate))})
        if k == 1:
            model.save_weights(os.path.join(HERE, "schedules.weights.h5"))
    return {
        "meta": meta(
            keras,
            jax,
            "cases: each schedule's value at steps 0..40 (float32) and serialize(schedule); "
            "training: Input(5) -> Dense(8, relu) -> Dense(3), mean squared error, "
            "Adam(learning_rate=CosineDecay(0.001, decay_steps=4, alpha=0.1, warmup_target=0.01, "
            "warmup_steps=2)); steps[k] after train_on_batch call k+1 (its loss, the weights, the "
            "iteration count, optimizer.learning_rate after it); schedules.weights.h5 saved after "
            "the second step.",
        ),
        "cases": cases,
        "x": arr(x),
        "y": arr(y),
        "initial_weights": initial,
        "steps": steps,
        "optimizer_variables": [v.path for v in model.optimizer.variables],
        "optimizer": keras.optimizers.serialize(model.optimizer),
    }


def make_ema_accumulation(keras, jax):
    """Keras's use_ema and gradient_accumulation_steps (tests/unit/ema_accumulation_test.cpp):
    an MLP trained 7 steps under each case (the loss, weights and iteration count after each
    step, the optimizer's variables' paths in Keras's order), the weights after fit's end
    (finalize_variable_values), and the third case's weights file after its third step."""
    from keras import ops

    specs = [
        ("sgd_accumulation", lambda: keras.optimizers.SGD(
            learning_rate=0.1, momentum=0.9, gradient_accumulation_steps=3)),
        ("adam_ema", lambda: keras.optimizers.Adam(
            learning_rate=0.01, use_ema=True, ema_momentum=0.9)),
        ("adam_ema_overwrite_accumulation", lambda: keras.optimizers.Adam(
            learning_rate=0.01, use_ema=True, ema_momentum=0.8, ema_overwrite_frequency=2,
            gradient_accumulation_steps=2)),
        ("adamw_accumulation_clipnorm_schedule", lambda: keras.optimizers.AdamW(
            learning_rate=keras.optimizers.schedules.ExponentialDecay(0.02, 3, 0.5),
            clipnorm=0.1, gradient_accumulation_steps=2)),
    ]
    rng = np.random.default_rng(9090)
    xs = [f32(rng.normal(size=(8, 5))) for _ in range(7)]
    y = f32(rng.normal(size=(8, 3)))
    cases = []
    for name, make in specs:
        keras.backend.clear_session()
        model = small_mlp(keras, np.random.default_rng(9191))
        model.compile(optimizer=make(), loss="mean_squared_error")
        initial = weights_list(model)
        steps = []
        for k, x in enumerate(xs):
            ret = model.train_on_batch(x, y, return_dict=True)
            steps.append({"loss": F32(ret["loss"]), "weights": weights_list(model),
                          "iterations": int(ops.convert_to_numpy(model.optimizer._iterations))})
            if k == 2 and name == "adam_ema_overwrite_accumulation":
                model.save_weights(os.path.join(HERE, "ema_accumulation.weights.h5"))
        paths = [v.path for v in model.optimizer.variables]
        averages = [arr(np.asarray(v)) for v in model.optimizer.variables
                    if v.path.endswith("_average")]
        model.optimizer.finalize_variable_values(model.trainable_weights)
        cases.append({"case": name, "initial_weights": initial, "steps": steps,
                      "optimizer_variables": paths, "averages": averages,
                      "finalized": weights_list(model),
                      "optimizer": keras.optimizers.serialize(model.optimizer)})
    return {
        "meta": meta(
            keras,
            jax,
            "Input(5) -> Dense(8, relu) -> Dense(3), mean squared error, 7 train_on_batch calls "
            "on batches xs[k] with the same y; cases: SGD(0.1, momentum 0.9, "
            "gradient_accumulation_steps=3); Adam(0.01, use_ema, ema_momentum 0.9); Adam(0.01, "
            "use_ema, ema_momentum 0.8, ema_overwrite_frequency 2, gradient_accumulation_steps "
            "2); AdamW(ExponentialDecay(0.02, 3, 0.5), clipnorm 0.1, gradient_accumulation_steps "
            "2). steps[k]: after call k+1 (iterations: the optimizer's own count, every call); "
            "averages: the moving averages after the last call; finalized: the weights after "
            "finalize_variable_values (what fit ends with); ema_accumulation.weights.h5: the "
            "third case after its third call.",
        ),
        "xs": [arr(x) for x in xs],
        "y": arr(y),
        "cases": cases,
    }


def make_nadam(keras, jax):
    """keras.optimizers.Nadam on an MLP (tests/unit/nadam_test.cpp): three train_on_batch steps
    (the loss, the weights, the optimizer's own scalar "nadam/variable"); its weights file after
    the second step (nadam.weights.h5: the scalar after the slots)."""
    from keras import ops

    rng = np.random.default_rng(5151)
    keras.backend.clear_session()
    x = f32(rng.normal(size=(8, 5)))
    y = f32(rng.normal(size=(8, 3)))
    model = small_mlp(keras, rng)
    model.compile(optimizer=keras.optimizers.Nadam(learning_rate=0.01, beta_1=0.85),
                  loss="mean_squared_error")
    initial = weights_list(model)
    steps = []
    for k in range(3):
        ret = model.train_on_batch(x, y, return_dict=True)
        steps.append({"loss": F32(ret["loss"]), "weights": weights_list(model),
                      "product": F32(ops.convert_to_numpy(model.optimizer._u_product))})
        if k == 1:
            model.save_weights(os.path.join(HERE, "nadam.weights.h5"))
    return {
        "meta": meta(keras, jax, "Input(5) -> Dense(8, relu) -> Dense(3), mean squared error, "
                     "Nadam(learning_rate=0.01, beta_1=0.85); steps[k] after train_on_batch call "
                     "k+1 (product: the optimizer's _u_product); nadam.weights.h5 after the "
                     "second step."),
        "x": arr(x),
        "y": arr(y),
        "initial_weights": initial,
        "steps": steps,
        "optimizer_variables": [v.path for v in model.optimizer.variables],
        "optimizer": keras.optimizers.serialize(model.optimizer),
    }


def make_gradient_clipping(keras, jax):
    """Keras's clipnorm and global_clipnorm over two variables (tests/unit/golden_test.cpp): three
    steps of each case from the same gradients, the variables after each."""
    rng = np.random.default_rng(4004)
    w0 = f32(rng.normal(size=(2, 3)))
    b0 = f32(rng.normal(size=(3,)))
    grads = [[f32(rng.normal(size=(2, 3)) * s), f32(rng.normal(size=(3,)) * s)]
             for s in (1.0, 3.0, 0.1)]
    specs = [
        ("sgd_clipnorm", keras.optimizers.SGD, {"learning_rate": 0.1, "momentum": 0.9,
                                                "clipnorm": 1.0}),
        ("adam_clipnorm", keras.optimizers.Adam, {"learning_rate": 0.01, "clipnorm": 0.5}),
        ("sgd_global_clipnorm", keras.optimizers.SGD, {"learning_rate": 0.1,
                                                       "global_clipnorm": 1.0}),
        ("adamw_global_clipnorm", keras.optimizers.AdamW, {"learning_rate": 0.01,
                                                           "global_clipnorm": 2.0}),
    ]
    cases = []
    for case_name, cls, kwargs in specs:
        opt = cls(**kwargs)
        w = keras.Variable(w0, name="w")
        b = keras.Variable(b0, name="b")
        steps = []
        for g in grads:
            opt.apply_gradients([(keras.ops.convert_to_tensor(g[0]), w),
                                 (keras.ops.convert_to_tensor(g[1]), b)])
            steps.append({"w": arr(np.asarray(w)), "b": arr(np.asarray(b))})
        cfg = opt.get_config()
        config = {k: cfg[k] for k in ("learning_rate", "momentum", "weight_decay", "clipnorm",
                                      "global_clipnorm")
                  if k in cfg and cfg[k] is not None}
        config["learning_rate"] = F32(config["learning_rate"])
        cases.append({"case": case_name, "class": cls.__name__, "config": config,
                      "steps": steps})
    return {
        "meta": meta(keras, jax, "two variables w (2, 3) and b (3,); the second step's "
                     "gradients are 3x the first's, the third's 0.1x (some clipped, some not)"),
        "w0": arr(w0),
        "b0": arr(b0),
        "grads": [[arr(g[0]), arr(g[1])] for g in grads],
        "cases": cases,
    }


def make_learning_rate_callbacks(keras, jax):
    """keras.callbacks.LearningRateScheduler and ReduceLROnPlateau on a small regression
    (tests/unit/learning_rate_callbacks_test.cpp): each case's history (loss, learning_rate) and
    what fit(verbose=2) printed, the step times replaced by <time>."""
    import contextlib
    import io
    import re

    rng = np.random.default_rng(7007)
    x = f32(rng.normal(size=(16, 4)))
    y = f32(rng.normal(size=(16, 2)))
    w = [f32(rng.normal(size=(4, 2)) * 0.5), f32(rng.normal(size=(2,)) * 0.1)]

    def halve_from_2(epoch, lr):
        return lr if epoch < 2 else lr * 0.5

    cases = [
        ("reduce", lambda: keras.optimizers.SGD(0.01), 6, 2,
         lambda: keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=1,
                                                   min_delta=10.0, min_lr=0.002, verbose=1)),
        ("reduce_cooldown", lambda: keras.optimizers.SGD(0.05), 8, 0,
         lambda: keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.1, patience=1,
                                                   min_delta=10.0, cooldown=2, mode="min")),
        ("scheduler", lambda: keras.optimizers.Adam(0.01), 5, 2,
         lambda: keras.callbacks.LearningRateScheduler(halve_from_2, verbose=1)),
    ]
    out = []
    for name, opt, epochs, verbose, cb in cases:
        keras.backend.clear_session()
        model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(2, name="dense")])
        model.set_weights(w)
        model.compile(optimizer=opt(), loss="mean_squared_error")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            h = model.fit(x, y, batch_size=16, epochs=epochs, verbose=verbose, callbacks=[cb()],
                          shuffle=False)
        text = re.sub(r"\d+(ms|us|s)/step", "<time>/step", buf.getvalue())
        text = re.sub(r" - \d+s - ", " - <time> - ", text)
        out.append({"case": name, "epochs": epochs, "verbose": verbose,
                    "loss": [F32(v) for v in h.history["loss"]],
                    "learning_rate": [float(v) for v in h.history["learning_rate"]],
                    "printed": text})
    return {
        "meta": meta(
            keras,
            jax,
            "Input(4) -> Dense(2), mean squared error, one batch of 16 per epoch (shuffle=False); "
            "reduce: SGD(0.01), ReduceLROnPlateau(monitor='loss', factor=0.5, patience=1, "
            "min_delta=10, min_lr=0.002, verbose=1); reduce_cooldown: SGD(0.05), "
            "ReduceLROnPlateau(monitor='loss', factor=0.1, patience=1, min_delta=10, cooldown=2, "
            "mode='min'); scheduler: Adam(0.01), LearningRateScheduler(lr if epoch < 2 else "
            "lr * 0.5, verbose=1). printed: fit's output, step times as <time>.",
        ),
        "x": arr(x),
        "y": arr(y),
        "initial_weights": [arr(v) for v in w],
        "cases": out,
    }


# --------------------------------------------------------------------------------------
# 13. convolution.json (conv2d, batch_normalization, pooling, global pooling, ReLU, Rescaling)
# --------------------------------------------------------------------------------------


def short(a):
    """float32 of values rounded to 2 decimals: exact inputs that print short ('0.53')."""
    return f32(np.round(np.asarray(a, dtype=np.float64), 2))


def grad_through_layer(layer, trainable, non_trainable, x, dy, **call_kwargs):
    """y, d(sum(y * dy))/d trainable, d/dx and the returned non-trainable variables, through
    layer.stateless_call (jax.value_and_grad)."""
    import jax
    import jax.numpy as jnp

    dyj = jnp.asarray(dy)
    if not layer.built:
        layer.build(tuple(np.shape(x)))

    def loss_fn(tv, xx):
        out, ntv = layer.stateless_call(tv, non_trainable, xx, **call_kwargs)
        return jnp.sum(out * dyj), (out, ntv)

    (_, (y, ntv)), (gw, gx) = jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)(
        [jnp.asarray(w) for w in trainable], jnp.asarray(x)
    )
    return np.asarray(y), [np.asarray(g) for g in gw], np.asarray(gx), [np.asarray(v) for v in ntv]


def same_pads(n, k, s):
    """lax "SAME" padding of one spatial dimension: (out, pad_before, pad_after)."""
    out = -(-n // s)
    total = max((out - 1) * s + k - n, 0)
    return out, total // 2, total - total // 2


def make_convolution(keras, jax):
    rng = np.random.default_rng(13013)
    L = keras.layers

    # ---- conv2d -------------------------------------------------------------------------
    # (name, (H, W), kernel_size, strides, padding, use_bias, activation)
    conv_specs = [
        ("k3_s1_valid", (7, 7), (3, 3), (1, 1), "valid", True, "linear"),
        ("k3_s1_same_nobias", (7, 7), (3, 3), (1, 1), "same", False, "linear"),
        ("k3_s2_valid", (7, 7), (3, 3), (2, 2), "valid", True, "linear"),
        ("k3_s2_same_h7", (7, 7), (3, 3), (2, 2), "same", True, "linear"),
        ("k3_s2_same_h8", (8, 8), (3, 3), (2, 2), "same", True, "linear"),
        ("k3_s1_same_relu", (7, 7), (3, 3), (1, 1), "same", True, "relu"),
        ("k2_s1_valid", (7, 7), (2, 2), (1, 1), "valid", True, "linear"),
        ("k2_s1_same", (7, 7), (2, 2), (1, 1), "same", True, "linear"),
        ("k2_s2_valid", (7, 7), (2, 2), (2, 2), "valid", False, "linear"),
        ("k2_s2_same", (7, 7), (2, 2), (2, 2), "same", True, "linear"),
        ("k6_s2_valid_nobias", (8, 8), (6, 6), (2, 2), "valid", False, "linear"),
        ("k6_s2_same_h8", (8, 8), (6, 6), (2, 2), "same", True, "linear"),
        ("k6_s2_same_h7", (7, 7), (6, 6), (2, 2), "same", True, "linear"),
        ("k6_s1_same", (7, 7), (6, 6), (1, 1), "same", False, "linear"),
        ("k2x3_s1x2_same_7x8", (7, 8), (2, 3), (1, 2), "same", True, "linear"),
    ]
    channels, filters = 3, 4
    conv_cases = []
    for name, (h, w), ks, st, padding, use_bias, activation in conv_specs:
        x = short(rng.normal(size=(2, h, w, channels)))
        kernel = short(rng.normal(size=ks + (channels, filters)) * 0.5)
        bias = short(rng.normal(size=(filters,)) * 0.5)
        layer = L.Conv2D(
            filters, ks, strides=st, padding=padding, use_bias=use_bias, activation=activation
        )
        layer.build((None, h, w, channels))
        weights = [kernel, bias] if use_bias else [kernel]
        layer.set_weights(weights)
        out_shape = tuple(layer.compute_output_shape((2, h, w, channels)))
        dy = short(rng.normal(size=out_shape))
        y, gw, gx, _ = grad_through_layer(layer, weights, [], x, dy)
        assert y.shape == out_shape, (name, y.shape, out_shape)
        if activation == "relu":
            lin = L.Conv2D(filters, ks, strides=st, padding=padding, use_bias=use_bias)
            lin.build((None, h, w, channels))
            lin.set_weights(weights)
            pre = np.asarray(lin(x))
            assert np.all(np.abs(pre) > 1e-3), name  # no relu kink
            assert np.any(pre < 0) and np.any(pre > 0)
        pads = []
        for n, k, s in zip((h, w), ks, st):
            if padding == "same":
                _, pb, pa = same_pads(n, k, s)
            else:
                pb, pa = 0, 0
            pads.append([pb, pa])
        case = {
            "name": name,
            "kernel_size": list(ks),
            "strides": list(st),
            "padding": padding,
            "use_bias": use_bias,
            "activation": activation,
            "pads_hw": pads,
            "x": arr(x),
            "kernel": arr(kernel),
        }
        if use_bias:
            case["bias"] = arr(bias)
        case.update({"dy": arr(dy), "y": arr(y), "dx": arr(gx), "dkernel": arr(gw[0])})
        if use_bias:
            case["dbias"] = arr(gw[1])
        conv_cases.append(case)

    # ---- batch_normalization ------------------------------------------------------------
    bn_default = L.BatchNormalization()
    bn_cases = []
    for name, shape, center, scale in [
        ("4d_center_scale", (4, 3, 3, 5), True, True),
        ("4d_center_noscale", (4, 3, 3, 5), True, False),
        ("4d_nocenter_scale", (4, 3, 3, 5), False, True),
        ("4d_nocenter_noscale", (4, 3, 3, 5), False, False),
        ("2d_center_scale", (6, 5), True, True),
    ]:
        c = shape[-1]
        # Per-channel offsets and scales so that the statistics matter.
        shift = short(rng.uniform(-1.0, 1.0, size=(c,)))
        spread = short(rng.uniform(0.5, 2.0, size=(c,)))
        batches = [short(rng.normal(size=shape) * spread + shift) for _ in range(3)]
        gamma = short(rng.uniform(0.5, 1.5, size=(c,)))
        beta = short(rng.uniform(-0.5, 0.5, size=(c,)))
        moving_mean = short(rng.uniform(-0.5, 0.5, size=(c,)))
        moving_variance = short(rng.uniform(0.5, 1.5, size=(c,)))
        dy = short(rng.normal(size=shape))

        layer = L.BatchNormalization(center=center, scale=scale)
        layer.build((None,) + shape[1:])
        names = [v.path.split("/")[-1] for v in layer.weights]
        trainable_names = [v.path.split("/")[-1] for v in layer.trainable_variables]
        assert [v.path.split("/")[-1] for v in layer.non_trainable_variables] == [
            "moving_mean",
            "moving_variance",
        ]
        given = {"gamma": gamma, "beta": beta, "moving_mean": moving_mean,
                 "moving_variance": moving_variance}
        layer.set_weights([given[n] for n in names])
        trainable = [given[n] for n in trainable_names]
        moving = [moving_mean, moving_variance]

        y_tr, gw_tr, gx_tr, ntv1 = grad_through_layer(
            layer, trainable, moving, batches[0], dy, training=True
        )
        ntv = moving
        after = []
        for xb in batches:
            _, _, _, ntv = grad_through_layer(layer, trainable, ntv, xb, dy, training=True)
            after.append(ntv)
        assert all(np.array_equal(a, b) for a, b in zip(after[0], ntv1))
        y_inf, gw_inf, gx_inf, ntv_inf = grad_through_layer(
            layer, trainable, moving, batches[0], dy, training=False
        )
        assert all(np.array_equal(a, b) for a, b in zip(ntv_inf, moving))

        def grads(gw):
            g = dict(zip(trainable_names, gw))
            d = {}
            if "gamma" in g:
                d["dgamma"] = arr(g["gamma"])
            if "beta" in g:
                d["dbeta"] = arr(g["beta"])
            return d

        cfg = layer.get_config()
        case = {
            "name": name,
            "axis": cfg["axis"],
            "momentum": F32(cfg["momentum"]),
            "epsilon": F32(cfg["epsilon"]),
            "center": cfg["center"],
            "scale": cfg["scale"],
            "weights_order": names,
            "x": arr(batches[0]),
            "x_batches_2_3": [arr(batches[1]), arr(batches[2])],
        }
        if scale:
            case["gamma"] = arr(gamma)
        if center:
            case["beta"] = arr(beta)
        case.update(
            {
                "moving_mean": arr(moving_mean),
                "moving_variance": arr(moving_variance),
                "dy": arr(dy),
                "training": dict(
                    {"y": arr(y_tr), "dx": arr(gx_tr)},
                    **grads(gw_tr),
                    moving_mean_after_1=arr(after[0][0]),
                    moving_variance_after_1=arr(after[0][1]),
                    moving_mean_after_3=arr(after[2][0]),
                    moving_variance_after_3=arr(after[2][1]),
                ),
                "inference": dict({"y": arr(y_inf), "dx": arr(gx_inf)}, **grads(gw_inf)),
            }
        )
        bn_cases.append(case)

    # ---- pooling ------------------------------------------------------------------------
    ph, pw, pc = 7, 7, 3
    n_el = 2 * ph * pw * pc
    # Distinct values (a permutation of multiples of 0.1): no ties in any max-pool window.
    xp = f32(np.round((rng.permutation(n_el) - n_el // 2) / 10.0, 1)).reshape(2, ph, pw, pc)
    assert len(np.unique(xp)) == n_el
    pool_specs = [
        ("pool2_s2_valid", 2, 2, "valid"),
        ("pool3_s2_same", 3, 2, "same"),
        ("pool2_s1_valid", 2, 1, "valid"),
        ("pool2_s2_same", 2, 2, "same"),
    ]
    pool_cases = []
    for name, pool, stride, padding in pool_specs:
        mx = L.MaxPooling2D(pool_size=pool, strides=stride, padding=padding)
        av = L.AveragePooling2D(pool_size=pool, strides=stride, padding=padding)
        out_shape = tuple(mx.compute_output_shape((2, ph, pw, pc)))
        dy = short(rng.normal(size=out_shape))
        ym, _, gxm, _ = grad_through_layer(mx, [], [], xp, dy)
        ya, _, gxa, _ = grad_through_layer(av, [], [], xp, dy)
        pads = [[0, 0], [0, 0]]
        if padding == "same":
            pads = [list(same_pads(ph, pool, stride)[1:]), list(same_pads(pw, pool, stride)[1:])]
        pool_cases.append(
            {
                "name": name,
                "pool_size": [pool, pool],
                "strides": [stride, stride],
                "padding": padding,
                "pads_hw": pads,
                "dy": arr(dy),
                "max": {"y": arr(ym), "dx": arr(gxm)},
                "average": {"y": arr(ya), "dx": arr(gxa)},
            }
        )

    # ---- global average pooling, ReLU, Rescaling on 4-D ---------------------------------
    xg = short(rng.normal(size=(2, 3, 4, 5)))
    dyg = short(rng.normal(size=(2, 5)))
    yg, _, gxg, _ = grad_through_layer(L.GlobalAveragePooling2D(), [], [], xg, dyg)

    xr = short(rng.normal(size=(2, 3, 4, 5)))
    assert np.all(xr != 0)
    dyr = short(rng.normal(size=(2, 3, 4, 5)))
    yr, _, gxr, _ = grad_through_layer(L.ReLU(), [], [], xr, dyr)

    xs = f32(rng.integers(0, 256, size=(2, 4, 4, 1)))
    dys = short(rng.normal(size=(2, 4, 4, 1)))
    resc = L.Rescaling(1.0 / 255.0)
    ys, _, gxs, _ = grad_through_layer(resc, [], [], xs, dys)

    return {
        "meta": meta(
            keras,
            jax,
            "NHWC (channels_last). Inputs, kernels, biases, BN parameters and dy are float32 "
            "values of numbers rounded to 2 decimals (numpy.random.default_rng(13013)), set "
            "explicitly. Gradients are of L = sum(y * dy) via jax.value_and_grad through "
            "layer.stateless_call. conv2d: 'same' pads like lax/TF: out = ceil(n / s), total = "
            "max((out - 1) * s + k - n, 0), before = total // 2, after = total - before "
            "(pads_hw = [[top, bottom], [left, right]]). batch_normalization: training: batch "
            "mean and biased variance over all axes but the last; y = x * inv + (beta - mean "
            "* inv), inv = rsqrt(var + epsilon) * gamma; moving = moving * momentum + stat * "
            "float32(1 - momentum); 'after_3' chains x, x_batches_2_3[0], x_batches_2_3[1] "
            "starting from the given moving statistics; inference uses the given moving "
            "statistics. pooling: the same x for every case, all values distinct (no ties in "
            "a max window: JAX's tie-breaking of the max-pool gradient is not part of the "
            "contract); 'same' max pooling pads with -inf, 'same' average pooling divides by "
            "the number of non-padded elements in the window.",
        ),
        "conv2d": {"channels": channels, "filters": filters, "cases": conv_cases},
        "batch_normalization": {
            "keras_defaults": {
                "momentum": F32(bn_default.momentum),
                "epsilon": F32(bn_default.epsilon),
                "one_minus_momentum_float32": F32(1.0 - bn_default.momentum),
            },
            "cases": bn_cases,
        },
        "pooling": {"x": arr(xp), "cases": pool_cases},
        "global_average_pooling2d": {"x": arr(xg), "dy": arr(dyg), "y": arr(yg), "dx": arr(gxg)},
        "relu": {"x": arr(xr), "dy": arr(dyr), "y": arr(yr), "dx": arr(gxr)},
        "rescaling": {
            "scale": F32(resc.scale),
            "scale_text": "1/255",
            "offset": F32(resc.offset),
            "x": arr(xs),
            "dy": arr(dys),
            "y": arr(ys),
            "dx": arr(gxs),
        },
    }


# --------------------------------------------------------------------------------------
# 14. cnn_step.json (the seeds/002 CNN, three train_on_batch steps)
# --------------------------------------------------------------------------------------


def build_seed002_cnn(keras, dropout):
    """seeds/002's get_model(), layer for layer; Dropout(0.5) only when dropout is True."""
    inputs = keras.Input(shape=(28, 28, 1))
    x = keras.layers.Rescaling(1.0 / 255.0)(inputs)
    x = keras.layers.Conv2D(filters=12, kernel_size=3, padding="same", use_bias=False)(x)
    x = keras.layers.BatchNormalization(scale=False, center=True)(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(filters=24, kernel_size=6, use_bias=False, strides=2)(x)
    x = keras.layers.BatchNormalization(scale=False, center=True)(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(
        filters=32, kernel_size=6, padding="same", strides=2, name="large_k"
    )(x)
    x = keras.layers.BatchNormalization(scale=False, center=True)(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(256, activation="relu")(x)
    if dropout:
        x = keras.layers.Dropout(0.5)(x)
    outputs = keras.layers.Dense(10)(x)
    return keras.Model(inputs, outputs)


def summary_lines(model):
    chunks = []
    model.summary(print_fn=lambda s, **kw: chunks.append(s))
    return "".join(chunks).split("\n")


def make_cnn_step(keras, jax):
    import jax.numpy as jnp

    def weights_of(model, only=None):
        out = []
        for v in model.weights:
            if only is not None and not only(v):
                continue
            out.append({"path": v.path, "trainable": v.trainable, "value": arr(np.asarray(v))})
        return out

    def layer_list(model):
        res = []
        for layer in model.layers:
            d = {"name": layer.name, "class": type(layer).__name__}
            cfg = layer.get_config()
            for key in ("filters", "kernel_size", "strides", "padding", "use_bias", "units",
                        "activation", "center", "scale", "momentum", "epsilon", "rate"):
                if key in cfg:
                    v = cfg[key]
                    d[key] = list(v) if isinstance(v, tuple) else v
            if type(layer).__name__ == "Rescaling":
                d["scale"] = F32(layer.scale)
                d["offset"] = F32(layer.offset)
            if "input_shape" not in d and type(layer).__name__ != "InputLayer":
                d["output_shape"] = [None if s is None else int(s) for s in layer.output.shape]
            res.append(d)
        return res

    def is_moving(v):
        return not v.trainable

    rng = np.random.default_rng(14014)
    x = f32(rng.integers(0, 256, size=(8, 28, 28, 1)))
    y = rng.integers(0, 10, size=(8,)).astype(np.int32)

    # The seed's model, with Dropout, for its summary (names of a fresh session).
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    seed_model = build_seed002_cnn(keras, dropout=True)
    seed_summary = summary_lines(seed_model)
    seed_layer_names = [layer.name for layer in seed_model.layers]

    # The recorded model: the same without Dropout.
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    model = build_seed002_cnn(keras, dropout=False)
    assert [layer.name for layer in model.layers] == [
        n for n in seed_layer_names if n != "dropout"
    ]
    summary = summary_lines(model)
    initial = weights_of(model)
    init_values = [np.asarray(v) for v in model.weights]

    tv = [v.value for v in model.trainable_variables]
    ntv = [v.value for v in model.non_trainable_variables]
    out_inf, _ = model.stateless_call(tv, ntv, x, training=False)
    out_tr, _ = model.stateless_call(tv, ntv, x, training=True)

    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    steps = []
    for k in range(3):
        loss = model.train_on_batch(x, y)
        steps.append(
            {"step": k + 1, "loss": F32(loss), "moving_statistics": weights_of(model, is_moving)}
        )
    final = weights_of(model)
    pred = model.predict(x, batch_size=len(x), verbose=0)
    bias_path = "large_k/bias"
    bias_after = np.asarray([v for v in model.weights if v.path == bias_path][0])

    # What the seed's own training loop does: model.stateless_call(trainable, non_trainable,
    # x) WITHOUT training=True, i.e. inference mode (BatchNormalization normalises with the
    # moving statistics and leaves them unchanged, Dropout passes everything), jax.jit,
    # jax.value_and_grad and optimizer.stateless_apply. Same initial weights as above.
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    smodel = build_seed002_cnn(keras, dropout=True)
    smodel.set_weights(init_values)
    optimizer = keras.optimizers.Adam(1e-3)
    loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer.build(smodel.trainable_variables)

    def compute_loss(trainable_variables, non_trainable_variables, xx, yy):
        y_pred, updated = smodel.stateless_call(trainable_variables, non_trainable_variables, xx)
        return loss_obj(yy, y_pred), updated

    compute_gradients = jax.value_and_grad(compute_loss, has_aux=True)

    @jax.jit
    def train_step(train_state, xx, yy):
        trainable_variables, non_trainable_variables, optimizer_variables = train_state
        (loss_value, non_trainable_variables), grads = compute_gradients(
            trainable_variables, non_trainable_variables, xx, yy
        )
        trainable_variables, optimizer_variables = optimizer.stateless_apply(
            optimizer_variables, grads, trainable_variables
        )
        return loss_value, (trainable_variables, non_trainable_variables, optimizer_variables)

    state = (
        [v.value for v in smodel.trainable_variables],
        [v.value for v in smodel.non_trainable_variables],
        [v.value for v in optimizer.variables],
    )
    moving0 = [np.asarray(v) for v in state[1]]
    seed_losses = []
    for _ in range(3):
        loss_value, state = train_step(state, jnp.asarray(x), jnp.asarray(y))
        seed_losses.append(F32(loss_value))
    assert all(np.array_equal(a, np.asarray(b)) for a, b in zip(moving0, state[1]))
    for variable, value in zip(smodel.trainable_variables, state[0]):
        variable.assign(value)
    for variable, value in zip(smodel.non_trainable_variables, state[1]):
        variable.assign(value)
    # The three large kernels are left out to keep the file small (the losses and the outputs
    # after step 3 depend on them).
    seed_omitted = [v.path for v in smodel.trainable_variables if int(np.prod(v.shape)) > 4096]
    seed_final = weights_of(smodel, lambda v: v.trainable and v.path not in seed_omitted)
    seed_pred, _ = smodel.stateless_call(
        [v.value for v in smodel.trainable_variables],
        [v.value for v in smodel.non_trainable_variables],
        x,
    )

    return {
        "meta": meta(
            keras,
            jax,
            "seeds/002's CNN (get_model()) WITHOUT its Dropout(0.5) layer: Keras draws the "
            "dropout mask from JAX's RNG, which tessel cannot reproduce. Built as "
            "keras.Model(inputs, outputs) after clear_session() and "
            "keras.utils.set_random_seed(0), so names are those of a fresh session and the "
            "initial weights are Keras's own initialisation (glorot_uniform kernels, zero "
            "biases and beta, moving_mean 0, moving_variance 1). x: 8 samples of integer "
            "values in [0, 255] (numpy.random.default_rng(14014)), y: labels 0..9. Compiled "
            "with Adam(1e-3) and SparseCategoricalCrossentropy(from_logits=True), no metrics. "
            "steps[k].loss is train_on_batch(x, y) on call k+1: the loss of that batch with "
            "the weights from BEFORE the update, BatchNormalization in training mode (batch "
            "statistics); steps[k].moving_statistics are the moving means and variances after "
            "the update. final_weights after step 3; predictions = model.predict(x) after step "
            "3 (inference mode: moving statistics). large_k/bias feeds a BatchNormalization "
            "in training mode, which subtracts the batch mean: its gradient is 0 up to "
            "rounding, so its values after the steps are rounding noise passed through Adam "
            "(|value| <= 3 * lr); compare it with an absolute tolerance. seed_loop: the "
            "seed's own training loop, which calls model.stateless_call without "
            "training=True, so BatchNormalization runs in INFERENCE mode (moving statistics, "
            "never updated) and Dropout is the identity; the full seed model (with Dropout) "
            "from the same initial weights, 3 jitted steps of jax.value_and_grad + "
            "optimizer.stateless_apply on the same batch; its final trainable weights are recorded "
            "except the three large kernels (final_trainable_weights_except).",
        ),
        "seed": "seeds/002 (keras.io distributed training with JAX, Korean translation)",
        "model_name": model.name,
        "layers": layer_list(model),
        "seed_model_layers": seed_layer_names,
        "compile": "optimizer=Adam(1e-3), loss=SparseCategoricalCrossentropy(from_logits=True)",
        "x": arr(x),
        "y": iarr(y),
        "initial_weights": initial,
        "initial_outputs_inference": arr(out_inf),
        "initial_outputs_training": arr(out_tr),
        "steps": steps,
        "final_weights": final,
        "predictions": arr(pred),
        "large_k_bias_abs_max_after_3": F32(np.max(np.abs(bias_after))),
        "summary_lines": summary,
        "seed_model_summary_lines": seed_summary,
        "seed_loop": {
            "description": "seeds/002's training loop: loss_value, grads = "
            "jax.value_and_grad(stateless_call(trainable, non_trainable, x) -> loss) with no "
            "training argument (BatchNormalization in inference mode with moving_mean 0 and "
            "moving_variance 1, unchanged; Dropout off), optimizer.stateless_apply, under "
            "jax.jit; the seed model WITH Dropout, starting from initial_weights",
            "losses": seed_losses,
            "moving_statistics_unchanged": True,
            "final_trainable_weights_except": seed_omitted,
            "final_trainable_weights": seed_final,
            "outputs_after_3": arr(seed_pred),
        },
    }


# --------------------------------------------------------------------------------------
# 7. progress bars (run in child processes: stdout is a file, or a pseudo-terminal)
# --------------------------------------------------------------------------------------

PROGRESS_MODES = {
    "progress_verbose1_notty.bin": ("fit1", False),
    "progress_verbose1_tty.bin": ("fit1", True),
    "progress_verbose2.bin": ("fit2", False),
    "progress_verbose2_tty.bin": ("fit2", True),
    "progress_evaluate.bin": ("eval", False),
    "progress_evaluate_tty.bin": ("eval", True),
    "summary_seed001_tty.bin": ("summary", True),
    # model.summary() straight to a file with COLUMNS unset: terminal size falls back to 80
    # columns, so the table is 80 - 4 = 76 wide.
    "summary_seed001_notty_default.txt": ("summary", "default"),
}


def progress_child(mode):
    """Runs in a child process; prints only what Keras prints to stdout."""
    import time

    import keras

    if mode == "summary":
        # seeds/001 model, printed by model.summary() itself (no print_fn).
        model = keras.Sequential(
            [
                keras.Input(shape=(784,)),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        model.summary()
        return
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(7007)
    x = f32(rng.normal(size=(64, 4)))
    y = (np.abs(x[:, 0] * 2).astype(np.int32) % 3).astype(np.int32)
    xv = f32(rng.normal(size=(16, 4)))
    yv = (np.abs(xv[:, 0] * 2).astype(np.int32) % 3).astype(np.int32)

    model = keras.Sequential(
        [
            keras.Input(shape=(4,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(3),
        ]
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )

    class Slow(keras.callbacks.Callback):
        # Keras redraws a dynamic bar at most every 0.05 s; sleeping 0.06 s a batch makes
        # every step redraw, whatever the speed of the machine.
        def on_train_batch_end(self, batch, logs=None):
            time.sleep(0.06)

        def on_test_batch_end(self, batch, logs=None):
            time.sleep(0.06)

    if mode in ("fit1", "fit2"):
        model.fit(
            x,
            y,
            batch_size=8,
            epochs=2,
            verbose=1 if mode == "fit1" else 2,
            validation_data=(xv, yv),
            shuffle=False,
            callbacks=[Slow()],
        )
    elif mode == "eval":
        model.evaluate(x, y, batch_size=8, verbose=1, callbacks=[Slow()])
    sys.stdout.flush()


def capture_progress():
    import fcntl
    import pty
    import struct
    import subprocess
    import termios
    import tty

    env = dict(os.environ)
    env["COLUMNS"] = str(SUMMARY_COLUMNS)
    env["PYTHONUNBUFFERED"] = "1"
    index = []
    for fname, (mode, use_tty) in PROGRESS_MODES.items():
        cmd = [sys.executable, os.path.abspath(__file__), "--progress-child", mode]
        if use_tty == "default":
            env_d = dict(env)
            env_d.pop("COLUMNS")
            env_d.pop("LINES", None)
            with open(os.path.join(HERE, fname), "wb") as out:
                subprocess.run(
                    cmd, stdout=out, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                    env=env_d, check=True,
                )
        elif not use_tty:
            with open(os.path.join(HERE, fname), "wb") as out:
                subprocess.run(cmd, stdout=out, stderr=subprocess.DEVNULL, env=env, check=True)
        else:
            master, slave = pty.openpty()
            # Raw mode: the bytes Keras writes arrive unchanged (no "\n" -> "\r\n").
            tty.setraw(slave)
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, SUMMARY_COLUMNS, 0, 0))
            env_t = dict(env)
            env_t.pop("COLUMNS")  # let the tty size speak (it is SUMMARY_COLUMNS wide)
            env_t["TERM"] = "xterm-256color"
            proc = subprocess.Popen(
                cmd, stdout=slave, stderr=subprocess.DEVNULL, stdin=slave, env=env_t,
                close_fds=True,
            )
            os.close(slave)
            data = bytearray()
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                data += chunk
            proc.wait()
            os.close(master)
            assert proc.returncode == 0, (fname, proc.returncode)
            with open(os.path.join(HERE, fname), "wb") as out:
                out.write(bytes(data))
        with open(os.path.join(HERE, fname), "rb") as f:
            raw = f.read()
        print(f"wrote {fname} ({len(raw)} bytes)")
        index.append((fname, mode, use_tty, raw))

    lines = [
        "Keras progress output, captured by tests/golden/make_golden.py.",
        "Each section shows one .bin file (the exact bytes) as a Python bytes literal split",
        "after each b'\\n' so that \\r, \\x08 (backspace) and \\x1b (ANSI) sequences are visible.",
        "Model: Input(4) -> Dense(8, relu) -> Dense(3); Adam; SCCE(from_logits=True);",
        "metrics [SparseCategoricalAccuracy()]; 64 training samples, batch_size 8 (8 steps),",
        "validation 16 samples (2 steps); a callback sleeps 0.06 s after every batch so every",
        "step redraws the dynamic bar (Keras redraws at most every 0.05 s). Times (ms/step, s)",
        "differ between runs. 'tty' files ran under a pseudo-terminal in raw mode",
        f"({SUMMARY_COLUMNS} columns, TERM=xterm-256color); the others with stdout a file.",
        "",
    ]
    for fname, mode, use_tty, raw in index:
        where = {True: "pty", False: "file", "default": "file, COLUMNS unset"}[use_tty]
        lines.append(f"==== {fname}  (mode {mode}, stdout {where}) ====")
        start = 0
        while start < len(raw):
            end = raw.find(b"\n", start)
            end = len(raw) if end < 0 else end + 1
            lines.append(repr(raw[start:end]))
            start = end
        lines.append("")
    with open(os.path.join(HERE, "progress.txt"), "w") as f:
        f.write("\n".join(lines))
    print("wrote progress.txt")


# --------------------------------------------------------------------------------------


# Files allowed past write_json's default 200 kB: cnn_step.json holds the seeds/002 CNN's
# 49,378 weights twice (initial and after 3 steps).
MAX_BYTES = {"convolution": 400_000, "cnn_step": 1_600_000}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--progress-child", default=None)
    ap.add_argument("--skip-progress", action="store_true")
    ap.add_argument(
        "--only",
        default=None,
        help="comma-separated JSON file stems to write (e.g. 'functional,layer_normalization'; "
        "'functional' also writes its summary_*.txt files, 'summary' the summary_seed*.txt "
        "files); the progress files are then skipped unless 'progress' is listed. Default: "
        "everything.",
    )
    args = ap.parse_args()

    if args.progress_child:
        progress_child(args.progress_child)
        return

    os.environ["COLUMNS"] = str(SUMMARY_COLUMNS)
    import jax
    import keras

    assert keras.backend.backend() == "jax"
    keras.utils.set_random_seed(0)

    generators = [
        ("layers", make_layers),
        ("losses", make_losses),
        ("optimizers", make_optimizers),
        ("gradient_clipping", make_gradient_clipping),
        ("schedules", make_schedules),
        ("ema_accumulation", make_ema_accumulation),
        ("nadam", make_nadam),
        ("metrics", make_metrics),
        ("model_step", make_model_step),
        ("summary", make_summaries),
        ("functional", make_functional),
        ("layer_normalization", make_layer_normalization),
        ("binary_crossentropy", make_binary_crossentropy),
        ("mean_absolute_error", make_mean_absolute_error),
        ("custom_loss", make_custom_loss),
        ("user_optimizer", make_user_optimizer),
        ("learning_rate_callbacks", make_learning_rate_callbacks),
        ("convolution", make_convolution),
        ("cnn_step", make_cnn_step),
    ]
    only = None
    if args.only is not None:
        only = {n.strip() for n in args.only.split(",") if n.strip()}
        unknown = only - {n for n, _ in generators} - {"progress"}
        if unknown:
            ap.error(f"--only: unknown names {sorted(unknown)}")

    for stem, make in generators:
        if only is None or stem in only:
            write_json(f"{stem}.json", make(keras, jax), MAX_BYTES.get(stem, 200_000))
    if not args.skip_progress and (only is None or "progress" in only):
        capture_progress()


if __name__ == "__main__":
    main()
