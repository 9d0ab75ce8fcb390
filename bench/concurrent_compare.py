#!/usr/bin/env python3
"""training.concurrent_steps (K steps in flight on the same devices) side by
side with K = 1, in one invocation per section, with ratios.

  python3 bench/concurrent_compare.py --build-dir build mlp   # standalone K = 1, 2, 4
  python3 bench/concurrent_compare.py --build-dir build cnn   # 1 ps + 1 worker K = 1, 2 vs standalone

mlp   fashion_mlp, batch 100, standalone traind --threads T (default 2):
      concurrent_steps 1, 2 and 4 (each step a T / K share of the threads,
      at least one). Ratio: examples/sec against K = 1.
cnn   fashion_cnn, batch 100: standalone traind (--threads T, K = 1) against
      a 1 ps + 1 worker async cluster (worker --threads T; the ps is one
      event-loop thread) with K = 1 and K = 2, where the worker pushes and
      pulls for one step while the other computes (docs/devices.md,
      "Concurrent steps"). Ratio: examples/sec against standalone (issue 3's
      target for communication hidden behind compute: >= 0.95). Standalone
      with K = 2 is shown for reference.

Timing, locking and noise handling are bench/distributed_compare.py's: each
run holds /tmp/traind-bench.lock, waits for a quiet machine, the figure is
the median of its log windows after the first, the sides alternate their
order between rounds, and a cell is the median [min-max] over --rounds.
Pass --nice -10 (as root) to keep the measured processes' time slices
beside builds.
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import distributed_compare as dc  # noqa: E402  (bench/ is not a package)


def with_concurrent_steps(tmp, model, k):
  """A copy of `model` with training.concurrent_steps: k."""
  return dc.with_training_field(tmp, model, "concurrent_steps", k)


def run_sides(args, sides):
  """sides: {name: run() -> (rate, others, ...)}; each run --rounds times,
  alternating the order. Returns {name: ([rates], [others])}."""
  results = {name: ([], []) for name in sides}
  for r in range(args.rounds):
    for name in dc.alternate(r, list(sides)):
      rate, load = dc.measured(args, sides[name])[:2]
      results[name][0].append(rate)
      results[name][1].append(load)
      print(f"  round {r + 1}: {name} {rate:.0f} examples/sec (others {load:.2f})",
            file=sys.stderr)
  return results


def section_mlp(args, tmp):
  steps, log_every, threads = args.mlp_steps, args.mlp_steps // 6, args.threads
  models = {k: with_concurrent_steps(tmp, dc.FASHION_MLP, k) for k in (1, 2, 4)}
  sides = {f"standalone K = {k}": (lambda m=m: dc.run_standalone(args, m, steps, log_every,
                                                                 threads))
           for k, m in models.items()}
  results = run_sides(args, sides)
  dc.header(f"fashion_mlp, batch 100, {steps} steps, windows of {log_every} steps: standalone "
            f"--threads {threads}, concurrent_steps K (each step max(1, {threads} / K) threads)",
            args)
  print(f"  {'':44s} {'examples/sec':24s} {'ratio':6s}")
  base = results["standalone K = 1"]
  for name, (rates, others) in results.items():
    dc.print_row(args, name, rates, others, None if name.endswith("K = 1") else base)
  print("  ratio: against K = 1")


def section_cnn(args, tmp):
  steps, log_every, threads = args.cnn_steps, args.cnn_steps // 6, args.threads
  k2 = with_concurrent_steps(tmp, dc.FASHION_CNN, 2)
  sides = {
      "standalone K = 1": lambda: dc.run_standalone(args, dc.FASHION_CNN, steps, log_every,
                                                    threads),
      "1 ps + 1 worker K = 1": lambda: dc.run_cluster(args, tmp, dc.FASHION_CNN, 1, "async",
                                                      steps, log_every, threads),
      "1 ps + 1 worker K = 2": lambda: dc.run_cluster(args, tmp, k2, 1, "async", steps,
                                                      log_every, threads),
      "standalone K = 2": lambda: dc.run_standalone(args, k2, steps, log_every, threads),
  }
  results = run_sides(args, sides)
  dc.header(f"fashion_cnn, batch 100, {steps} steps, windows of {log_every} steps: standalone "
            f"(--threads {threads}) against 1 ps + 1 async worker (--threads {threads}; the ps "
            f"one event-loop thread)", args)
  print(f"  {'':44s} {'examples/sec':24s} {'ratio':6s}")
  base = results["standalone K = 1"]
  for name, (rates, others) in results.items():
    dc.print_row(args, name, rates, others, None if name == "standalone K = 1" else base)
  print("  ratio: against standalone K = 1 (target for the cluster: >= 0.95)")


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("sections", nargs="+", choices=["mlp", "cnn"])
  dc.add_run_options(parser, rounds=3)
  parser.add_argument("--threads", type=int, default=2,
                      help="compute threads of standalone traind and of the worker")
  parser.add_argument("--mlp-steps", type=int, default=1200)
  parser.add_argument("--cnn-steps", type=int, default=300)
  args = dc.parse_run_options(parser, "concurrent_compare.py")
  with tempfile.TemporaryDirectory(prefix="concurrent_compare.") as tmp:
    for section in args.sections:
      if section == "mlp":
        section_mlp(args, tmp)
      else:
        section_cnn(args, tmp)
      sys.stdout.flush()


if __name__ == "__main__":
  main()
