#!/usr/bin/env python3
"""traind's checkpoints against the Python safetensors library, both ways.

    safetensors_interop.py <path of safetensors_interop_helper>

(a) traind writes a checkpoint; safetensors.numpy.load_file reads it.
(b) safetensors.numpy.save_file writes a file; traind's reader reads it.
(c) a float64 file is rejected by traind's reader, naming tensor and dtype.
Exits 77 (ctest's skip) when numpy or safetensors is not installed.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)


def sample_tensors():
    """The tensors safetensors_interop_helper.cc's sampleTensors() makes."""
    shapes = {"dense/kernel": (3, 4), "dense/bias": (4,), "conv1/kernel": (2, 2, 1, 3),
              "step_scale": ()}
    return {name: ((np.arange(int(np.prod(shape))) - 5) / 8 + t).astype(np.float32).reshape(shape)
            for t, (name, shape) in enumerate(shapes.items())}


def check(condition, message):
    if not condition:
        print("FAILED:", message)
        sys.exit(1)


def main():
    helper = sys.argv[1]
    expected = sample_tensors()
    with tempfile.TemporaryDirectory(prefix="traind-interop-") as tmp:
        # (a) traind writes, safetensors reads.
        checkpoints = os.path.join(tmp, "checkpoints")
        out = subprocess.run([helper, "write", checkpoints], capture_output=True, text=True)
        check(out.returncode == 0, f"helper write: {out.stderr}")
        checkpoint = out.stdout.strip()
        with open(os.path.join(checkpoints, "latest")) as f:
            check(f.read() == "ckpt-0000000042\n", "latest names ckpt-0000000042")
        with open(os.path.join(checkpoint, "manifest.json")) as f:
            manifest = json.load(f)
        check(manifest["global_step"] == 42 and manifest["model_name"] == "interop",
              f"manifest {manifest}")
        tensors_file = os.path.join(checkpoint, manifest["tensors_file"])
        loaded = load_file(tensors_file)
        check(sorted(loaded) == sorted(expected), f"names {sorted(loaded)}")
        for name, value in expected.items():
            check(loaded[name].dtype == np.float32, f"{name}: dtype {loaded[name].dtype}")
            check(loaded[name].shape == value.shape, f"{name}: shape {loaded[name].shape}")
            check(np.array_equal(loaded[name], value), f"{name}: values {loaded[name]}")
        with safe_open(tensors_file, framework="np") as f:
            check(f.metadata().get("global_step") == "42", f"metadata {f.metadata()}")

        # (b) safetensors writes, traind reads.
        python_file = os.path.join(tmp, "python.safetensors")
        save_file(expected, python_file, metadata={"writer": "python safetensors"})
        out = subprocess.run([helper, "read", python_file], capture_output=True, text=True)
        check(out.returncode == 0, f"helper read: {out.stderr}")

        # (c) a dtype traind does not store is refused by name.
        f64_file = os.path.join(tmp, "f64.safetensors")
        save_file({"w": np.zeros((2, 2), np.float64)}, f64_file)
        out = subprocess.run([helper, "read", f64_file], capture_output=True, text=True)
        check(out.returncode == 1 and
              "tensor 'w': dtype F64 is not supported (traind reads F32 only)" in out.stderr,
              f"float64 file: exit {out.returncode}, {out.stderr}")
    print("safetensors interop: ok")


if __name__ == "__main__":
    main()
