#!/usr/bin/env python3
"""Writes the seed corpora of the parameter-server harnesses (fuzz_ps_server, fuzz_ps_worker)
into tests/fuzz/corpus/ps_server/ and corpus/ps_worker/: real messages as the chief, the workers
and the ps tasks send them, in each harness's input format (see the comment at the top of its
.cpp), and the files and configurations the chief reads. Run by make_corpus.sh.

  python3 tests/fuzz/make_ps_corpus.py OUT_DIR TESSEL_PS_KEYS_PROGRAM
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

out, keygen = sys.argv[1], sys.argv[2]

# The header's kinds (ps/transport.hpp).
HELLO, CREATE, PULL, PUSH, STATE, RESTORE, SHUTDOWN, READY, RUN, DONE, HEARTBEAT = range(1, 12)


def floats(values):
    return struct.pack("<%df" % len(values), *values)


def frame(data):
    return struct.pack("<H", len(data)) + data


def message(kind, a=0, b=0, c=0, d=0, frames=()):
    return bytes([kind, a, b, c, d, len(frames)]) + b"".join(frame(f) for f in frames)


def optimizer(name):
    """An optimizer's description as the chief sends it (ps/messages.hpp's optimizer_json)."""
    def described(class_name, fields):
        return {"class_name": class_name, "name": class_name.lower(),
                "module": "keras.optimizers", "registered_name": "",
                "config": [list(f) for f in fields], "weight_decay": 0.0, "clipvalue": 0.0,
                "exclude_from_weight_decay": []}
    if name == "adam":
        return described("Adam", [("learning_rate", 0.001), ("beta_1", 0.9), ("beta_2", 0.999),
                                  ("epsilon", 1e-07), ("amsgrad", False)])
    if name == "rmsprop":
        return described("RMSprop", [("learning_rate", 0.001), ("rho", 0.9), ("momentum", 0.0),
                                     ("epsilon", 1e-07), ("centered", False)])
    return described("SGD", [("learning_rate", 0.01), ("momentum", 0.9), ("nesterov", False)])


def create(generation, opt, shards):
    description = {"optimizer": optimizer(opt),
                   "shards": [{"path": p, "shape": s} for p, s, _ in shards]}
    return message(CREATE, generation, frames=[json.dumps(description).encode()] +
                   [floats(v) for _, _, v in shards])


def write(harness, name, data):
    os.makedirs(os.path.join(out, harness), exist_ok=True)
    with open(os.path.join(out, harness, name), "wb") as f:
        f.write(data)


# --- ps_server: sequences of requests.
shards = [("dense/kernel/shard_0", [2, 3], [0.1, -0.2, 0.3, 0.4, -0.5, 0.6]),
          ("dense/bias/shard_0", [3], [0.0, 0.0, 0.0])]
grads = [floats([1, 1, 1, 1, 1, 1]), floats([0.5, 0.5, 0.5])]
write("ps_server", "create_pull",
      create(1, "sgd", shards) + message(PULL) + message(HEARTBEAT))
write("ps_server", "pushes",
      create(1, "sgd", shards) + message(PUSH, 0, 1, 0, 1, grads) +
      message(PUSH, 1, 1, 1, 2, grads) + message(PUSH, 1, 1, 1, 2, grads) + message(PULL))
write("ps_server", "state_restore",
      create(1, "sgd", shards) + message(PUSH, 0, 1, 0, 1, grads) + message(STATE) +
      create(2, "sgd", shards) +
      message(RESTORE, 1, frames=[json.dumps({"learning_rate": 0.01}).encode()] +
              [floats(v) for _, _, v in shards] + [floats([0.1] * 6), floats([0.2] * 3)]) +
      message(PULL))
write("ps_server", "adam", create(1, "adam", shards) + message(PUSH, 3, 1, 0, 1, grads))
write("ps_server", "rmsprop", create(1, "rmsprop", shards) + message(PUSH, 3, 1, 0, 1, grads))
write("ps_server", "old_generation",
      create(2, "sgd", shards) + message(PUSH, 0, 1, 0, 1, grads) + message(PULL))
write("ps_server", "nan_push",
      create(1, "sgd", shards) +
      message(PUSH, 0, 1, 0, 1, [floats([1, float("nan"), 1, 1, 1, 1]), grads[1]]) +
      message(PUSH, 0, 1, 0, 1, grads))
write("ps_server", "before_create", message(PUSH, 0, 1, 0, 1, grads) + message(PULL) +
      message(STATE) + message(HELLO) + message(SHUTDOWN))

# --- ps_worker: a selector byte, then the reader's input.
# Pull replies from ps 0 and ps 1 of the harness's placement: three variables (5, 3), (3,),
# (4, 2), two shards each along the first dimension, placed by bytes on two ps tasks.
def pull_reply(p, sizes):
    return bytes([0, p]) + bytes([len(sizes)]) + b"".join(
        frame(floats([0.25 * (i + 1)] * n)) for i, n in enumerate(sizes))


# ps 0 holds shards of 9 and 4 values, ps 1 of 6, 2, 1 and 4.
write("ps_worker", "pull_ps0", pull_reply(0, [9, 4]))
write("ps_worker", "pull_ps1", pull_reply(1, [6, 2, 1, 4]))
write("ps_worker", "pull_short", pull_reply(0, [9]))
# A state from ps 0 with one slot per shard (5 iterations): the description, the values, the
# slots.
state = bytes([1, 5, 1]) + bytes([1 + 2 + 2]) + frame(json.dumps({"learning_rate": 0.001}).encode()) + \
    b"".join(frame(floats([1.0] * n)) for n in (9, 4)) + \
    b"".join(frame(floats([2.0] * n)) for n in (9, 4))
write("ps_worker", "state_ps0", state)
model = {"variables": [{"path": "dense/kernel", "shape": [5, 3]}, {"path": "dense/bias", "shape": [3]},
                       {"path": "dense_1/kernel", "shape": [4, 2]}]}
write("ps_worker", "model_same", bytes([2]) + json.dumps(model).encode())
model["variables"][0]["shape"] = [5, 4]
write("ps_worker", "model_other", bytes([2]) + json.dumps(model).encode())
write("ps_worker", "done", bytes([3]) + struct.pack("<dd", 0.6931, 2.0))
write("ps_worker", "done_nan", bytes([3]) + struct.pack("<dd", float("nan"), 0.0))
position = {"epochs_done": 2, "steps_per_epoch": 32, "next_index": 64,
            "weights": {"bytes": 27232, "crc32": 3735928559}}
write("ps_worker", "position", bytes([4]) + json.dumps(position).encode())
position["epochs_done"] = -1
write("ps_worker", "position_negative", bytes([4]) + json.dumps(position).encode())
for name in ("sgd", "adam", "rmsprop"):
    write("ps_worker", "optimizer_" + name, bytes([5]) + json.dumps(optimizer(name)).encode())
cluster = {"cluster": {"chief": ["127.0.0.1:2222"], "worker": ["localhost:2223", "[::1]:2224"],
                       "ps": ["ps0.example.com:2225"]}, "task": {"type": "ps", "index": 0}}
write("ps_worker", "tf_config", bytes([6]) + json.dumps(cluster).encode())
cluster["cluster"]["ps"] = ["127.0.0.1:2223"]
write("ps_worker", "tf_config_clash", bytes([6]) + json.dumps(cluster).encode())
with tempfile.TemporaryDirectory() as scratch:
    path = os.path.join(scratch, "cluster.keys")
    subprocess.run([keygen, path], check=True, stdout=subprocess.DEVNULL)
    with open(path, "rb") as f:
        write("ps_worker", "keys", bytes([7]) + f.read())
