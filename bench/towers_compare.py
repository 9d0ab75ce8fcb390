#!/usr/bin/env python3
"""Towers on the CPU: one training step split over two CPU devices (each
with one of the two threads, gradients averaged and applied by the towers'
threads) against one CPU device with both threads, side by side.

  python3 bench/towers_compare.py --build-dir build --nice -10

For fashion_mlp (1200 steps) and fashion_cnn (300 steps), batch 100,
standalone traind --threads 2 with training.devices [cpu] and
[cpu:0, cpu:1]. Target (issue 6): the towers no slower than one device.

Timing, locking and noise handling are bench/distributed_compare.py's: each
run holds /tmp/traind-bench.lock, waits for a quiet machine, the figure is
the median of its log windows after the first, the sides alternate their
order between rounds, and a cell is the median [min-max] over --rounds.
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import concurrent_compare as cc  # noqa: E402  (bench/ is not a package)
import distributed_compare as dc  # noqa: E402


def section(args, tmp, model, steps):
  log_every = steps // 6
  name = os.path.splitext(os.path.basename(model))[0]
  one = dc.with_training_field(tmp, model, "devices", "[cpu]")
  towers = dc.with_training_field(tmp, model, "devices", "[cpu:0, cpu:1]")
  sides = {
      "one device (cpu, 2 threads)": lambda: dc.run_standalone(args, one, steps, log_every, 2),
      "2 towers (cpu:0, cpu:1, 1 thread each)": lambda: dc.run_standalone(args, towers, steps,
                                                                          log_every, 2),
  }
  results = cc.run_sides(args, sides)
  dc.header(f"{name}, batch 100, {steps} steps, windows of {log_every} steps, standalone "
            f"--threads 2", args)
  print(f"  {'':44s} {'examples/sec':24s} {'ratio':6s}")
  names = list(results)
  dc.print_row(args, names[0], *results[names[0]])
  dc.print_row(args, names[1], *results[names[1]], results[names[0]])
  print("  ratio: towers against one device (target >= 1.0)")


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  dc.add_run_options(parser, rounds=5)
  args = dc.parse_run_options(parser, "towers_compare.py")
  with tempfile.TemporaryDirectory(prefix="towers_compare.") as tmp:
    section(args, tmp, dc.FASHION_MLP, 1200)
    sys.stdout.flush()
    section(args, tmp, dc.FASHION_CNN, 300)


if __name__ == "__main__":
  main()
