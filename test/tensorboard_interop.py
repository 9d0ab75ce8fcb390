#!/usr/bin/env python3
"""traind's TensorBoard event files, read by the real tensorboard package.

    tensorboard_interop.py <path of traind>

(a) a standalone run with --summary-dir: the scalars TensorBoard finds are
    the tags docs/operations.md lists, at the logged steps, with the values
    of traind's log lines;
(b) a run that stops and is resumed from its checkpoint, summaries in the
    default <checkpoint dir>/summaries: two event files, which TensorBoard
    joins into one series with every step once;
(c) a run with optimizer.clip_global_norm: global_norm, the logged norm;
(d) a run with training.histogram_every: a histogram of each variable at
    those steps, the last one's count, extremes, sum and buckets those of
    the final checkpoint's values (a value in the first bucket whose edge
    is above it, as TensorFlow's histograms count), and TensorBoard's
    Distributions made of them;
(e) a run with --summary-every 10 and --log-every 50: the scalars every 10
    steps, each the mean of its own 10 steps; log lines every 50 steps.
Exits 77 (ctest's skip) when tensorboard is not installed.
"""
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "models",
                     "regression.yaml")
LOSS_LINE = re.compile(r"step (\d+), loss = ([0-9.]+) \(([0-9.]+) examples/sec")
TEST_LINE = re.compile(r"step (\d+), test loss = ([0-9.]+)")
NORM_LINE = re.compile(r"step (\d+), loss = [0-9.]+, global norm = ([0-9.e+-]+), (\d+)% clipped")


def check(condition, message):
    if not condition:
        print("FAILED:", message)
        sys.exit(1)


def run(traind, model, *flags):
    """Runs traind on `model`; returns its log."""
    command = [traind, "--model", model, "--log-every", "50", "--eval-every", "100",
               "--threads", "1", *flags]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120)
    check(out.returncode == 0, f"{' '.join(command)} exited {out.returncode}:\n{out.stderr}")
    return out


def train(traind, *flags):
    """Runs traind on the regression model; returns its logged losses, throughput
    and test losses, each as {step: value}."""
    out = run(traind, MODEL, *flags)
    losses = {int(m[1]): float(m[2]) for m in LOSS_LINE.finditer(out.stderr)}
    throughput = {int(m[1]): float(m[3]) for m in LOSS_LINE.finditer(out.stderr)}
    test_losses = {int(m[1]): float(m[2]) for m in TEST_LINE.finditer(out.stderr)}
    return losses, throughput, test_losses


def scalars(summary_dir):
    accumulator = EventAccumulator(summary_dir)
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]}


def check_series(found, tag, logged, decimals):
    series = found[tag]
    check([step for step, _ in series] == sorted(logged),
          f"{tag}: steps {[s for s, _ in series]}, logged {sorted(logged)}")
    for step, value in series:
        check(abs(value - logged[step]) <= 0.5 * 10**-decimals + 1e-6 * abs(value),
              f"{tag} at step {step}: {value} in the event file, {logged[step]} logged")


def main():
    traind = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="traind-tensorboard-") as tmp:
        # (a) one run, an explicit summary directory.
        summary_dir = os.path.join(tmp, "summaries")
        losses, throughput, test_losses = train(traind, "--max-steps", "200",
                                                "--summary-dir", summary_dir)
        check(sorted(losses) == [50, 100, 150, 200], f"logged loss steps {sorted(losses)}")
        check(sorted(test_losses) == [100, 200], f"logged test steps {sorted(test_losses)}")
        files = glob.glob(os.path.join(summary_dir, "*"))
        check(len(files) == 1 and re.fullmatch(r"events\.out\.tfevents\.\d+\..+",
                                               os.path.basename(files[0])),
              f"one event file named as TensorFlow names them, found {files}")

        found = scalars(summary_dir)
        # A regression model: no accuracy.
        check(sorted(found) == ["examples_per_sec", "global_step/sec", "learning_rate", "loss",
                                "test/loss"], f"tags {sorted(found)}")
        check_series(found, "loss", losses, 4)
        check_series(found, "test/loss", test_losses, 6)
        check_series(found, "examples_per_sec", throughput, 1)
        # Standalone, a global step is a batch of the run's.
        batch = 32
        check(all(math.isclose(steps_per_sec * batch, throughput[step], rel_tol=0.01)
                  for step, steps_per_sec in found["global_step/sec"]),
              f"global_step/sec {found['global_step/sec']} against examples/sec {throughput}")
        check(all(math.isclose(v, 0.1, rel_tol=1e-6) for _, v in found["learning_rate"]),
              f"learning_rate {found['learning_rate']}")

        # (b) stopped at 100, resumed to 200; summaries beside the checkpoints.
        checkpoint_dir = os.path.join(tmp, "checkpoints")
        first, _, first_test = train(traind, "--max-steps", "100",
                                     "--checkpoint-dir", checkpoint_dir)
        second, _, second_test = train(traind, "--max-steps", "200",
                                       "--checkpoint-dir", checkpoint_dir)
        check(sorted(second) == [150, 200], f"the resumed run logged steps {sorted(second)}")
        default_dir = os.path.join(checkpoint_dir, "summaries")
        files = glob.glob(os.path.join(default_dir, "events.out.tfevents.*"))
        check(len(files) == 2, f"two event files in {default_dir}, found {files}")
        found = scalars(default_dir)
        check_series(found, "loss", {**first, **second}, 4)
        check_series(found, "test/loss", {**first_test, **second_test}, 6)

        # (c) clipping: the window's mean norm before clipping, as logged.
        clipped_model = os.path.join(tmp, "clipped.yaml")
        with open(MODEL) as spec, open(clipped_model, "w") as out:
            out.write(spec.read().replace("learning_rate: 0.1",
                                          "learning_rate: 0.1\n  clip_global_norm: 0.05"))
        clipped_dir = os.path.join(tmp, "clipped")
        log = run(traind, clipped_model, "--max-steps", "100", "--summary-dir", clipped_dir).stderr
        norms = {int(m[1]): float(m[2]) for m in NORM_LINE.finditer(log)}
        check(sorted(norms) == [50, 100], f"logged norm steps {sorted(norms)}:\n{log}")
        check(any(int(m[3]) > 0 for m in NORM_LINE.finditer(log)), f"no step clipped:\n{log}")
        series = scalars(clipped_dir)["global_norm"]
        check([step for step, _ in series] == [50, 100], f"global_norm steps {series}")
        check(all(math.isclose(value, norms[step], rel_tol=5e-4) for step, value in series),
              f"global_norm {series} against the logged {norms}")

        # (e) scalars every 10 steps, log lines every 50: each its own window.
        dense_dir = os.path.join(tmp, "dense")
        losses, _, _ = train(traind, "--max-steps", "100", "--summary-every", "10",
                             "--summary-dir", dense_dir)
        check(sorted(losses) == [50, 100], f"logged loss steps {sorted(losses)}")
        found = scalars(dense_dir)
        for tag in ["loss", "learning_rate", "examples_per_sec", "global_step/sec"]:
            check([step for step, _ in found[tag]] == list(range(10, 101, 10)),
                  f"{tag} steps {[step for step, _ in found[tag]]}")
        # A log line's loss is the mean of its 50 steps: of five summaries' means.
        dense = dict(found["loss"])
        for step, logged in losses.items():
            mean = sum(dense[s] for s in range(step - 40, step + 1, 10)) / 5
            check(abs(mean - logged) <= 5e-5 + 1e-6 * abs(logged),
                  f"the losses at {list(range(step - 40, step + 1, 10))} average {mean}, "
                  f"logged {logged} at step {step}")

        # (d) histograms of the variables every 50 steps.
        histogram_model = os.path.join(tmp, "histograms.yaml")
        with open(MODEL) as spec, open(histogram_model, "w") as out:
            out.write(spec.read().replace("log_every: 100", "log_every: 100\n  histogram_every: 50"))
        histogram_checkpoints = os.path.join(tmp, "histogram_checkpoints")
        run(traind, histogram_model, "--max-steps", "100", "--checkpoint-dir",
            histogram_checkpoints)
        # Every histogram kept (TensorBoard's reservoir keeps one by default).
        accumulator = EventAccumulator(os.path.join(histogram_checkpoints, "summaries"),
                                       size_guidance={"histograms": 0})
        accumulator.Reload()
        tags = sorted(accumulator.Tags()["histograms"])
        check(tags == ["hidden/bias", "hidden/kernel", "output/bias", "output/kernel"],
              f"histogram tags {tags}")
        final = read_safetensors(os.path.join(histogram_checkpoints, "ckpt-0000000100",
                                              "model.safetensors"))
        for tag in tags:
            events = accumulator.Histograms(tag)
            check([e.step for e in events] == [50, 100], f"{tag}: histogram steps "
                  f"{[e.step for e in events]}")
            h = events[-1].histogram_value
            values = final[tag].astype(np.float64).ravel()
            check(h.num == values.size and h.min == values.min() and h.max == values.max(),
                  f"{tag}: num {h.num}, min {h.min}, max {h.max}; the checkpoint's "
                  f"{values.size}, {values.min()}, {values.max()}")
            check(math.isclose(h.sum, values.sum(), rel_tol=1e-9, abs_tol=1e-9) and
                  math.isclose(h.sum_squares, (values ** 2).sum(), rel_tol=1e-9),
                  f"{tag}: sum {h.sum}, sum of squares {h.sum_squares}")
            below = [int((values < limit).sum()) for limit in h.bucket_limit]
            check(list(np.cumsum(h.bucket).astype(int)) == below,
                  f"{tag}: buckets {list(h.bucket)} of edges {list(h.bucket_limit)}")
            check(len(accumulator.CompressedHistograms(tag)) == 2,
                  f"{tag}: TensorBoard made no distribution of it")
    print("ok: TensorBoard reads traind's scalars at the logged steps and values, and its "
          "histograms")


def read_safetensors(path):
    """A safetensors file's F32 tensors, by name."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
        data = f.read()
    return {name: np.frombuffer(data[entry["data_offsets"][0]:entry["data_offsets"][1]],
                                np.float32).reshape(entry["shape"])
            for name, entry in header.items() if name != "__metadata__"}


if __name__ == "__main__":
    main()
