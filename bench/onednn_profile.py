#!/usr/bin/env python3
"""Where a traind training step spends its time, per oneDNN primitive.

  python3 bench/onednn_profile.py --build-dir build --model fashion_cnn --steps 60

Runs traind with ONEDNN_VERBOSE=1, keeps the primitive executions between
the end of its first log window (warm-up, primitive creation) and its last
log line (before the final evaluation), and prints per step: each
primitive's calls, milliseconds, share of the step's wall time and GFLOP/s,
and the time spent outside oneDNN (loss, optimizer, input pipeline, the
code between primitives). ONEDNN_VERBOSE times each execution on its own,
which adds a little to every call: compare the wall time with a plain run.
"""
import argparse
import collections
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WINDOW = re.compile(r"step (\d+), loss = \S+.*\(([\d.]+) examples/sec; ([\d.]+) sec/batch\)")
CONV = re.compile(r"mb(\d+)_?g?\d*_?ic(\d+)oc(\d+)_ih\d+oh(\d+)kh(\d+)\S*_iw\d+ow(\d+)kw(\d+)")
INNER_PRODUCT = re.compile(r"mb(\d+)ic(\d+)(?:ih(\d+))?(?:iw(\d+))?oc(\d+)")


def problem_flops(primitive, problem):
  """FLOPs of one execution, for the primitives whose work is multiply-adds."""
  if primitive == "convolution":
    m = CONV.search(problem)
    if m:
      mb, ic, oc, oh, kh, ow, kw = map(int, m.groups())
      return 2 * mb * oc * oh * ow * ic * kh * kw
  if primitive == "inner_product":
    m = INNER_PRODUCT.search(problem)
    if m:
      mb, ic, ih, iw, oc = (int(g) if g else 1 for g in m.groups())
      return 2 * mb * ic * ih * iw * oc
  if primitive == "matmul":
    dims = [list(map(int, d.split("x"))) for d in problem.split(":")[:2]]
    if len(dims) == 2 and len(dims[0]) >= 2 and len(dims[1]) >= 2:
      return 2 * dims[0][-2] * dims[0][-1] * dims[1][-1]
  return 0


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--build-dir", default=os.path.join(REPO, "build"))
  parser.add_argument("--model", default="fashion_cnn")
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--steps", type=int, default=60)
  parser.add_argument("--log-every", type=int, default=10)
  parser.add_argument("--top", type=int, default=25, help="rows shown")
  args = parser.parse_args()

  traind = os.path.join(args.build_dir, "daemon", "traind")
  argv = [traind, "--model", os.path.join(REPO, "configs", "models", args.model + ".yaml"),
          "--max-steps", str(args.steps), "--threads", str(args.threads), "--log-every",
          str(args.log_every), "--eval-every", "0", "--checkpoint-dir", ""]
  env = dict(os.environ, ONEDNN_VERBOSE="1", OMP_NUM_THREADS=str(args.threads))
  proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True, cwd=REPO)
  if proc.returncode != 0:
    sys.exit(f"onednn_profile.py: traind failed:\n{proc.stdout[-3000:]}")

  totals = collections.defaultdict(lambda: [0, 0.0, 0])  # calls, ms, flops per call
  windows = []  # (step, sec/batch) of the windows after the first
  first_step = last_step = None
  pending = []  # executions since the last window line
  isa = ""
  for line in proc.stdout.splitlines():
    if line.startswith("onednn_verbose,info,cpu,isa:"):
      isa = line.split("isa:", 1)[1]
    if line.startswith("onednn_verbose,exec,"):
      pending.append(line.split(","))
      continue
    m = WINDOW.search(line)
    if not m:
      continue
    step = int(m.group(1))
    if first_step is None:
      first_step = step
    else:
      last_step = step
      windows.append(float(m.group(3)))
      for f in pending:
        # exec,cpu,<primitive>,<impl>,<prop_kind>,<formats>,<attrs>,<aux>,<problem>,<ms>
        primitive, impl, prop, problem, ms = f[3], f[4], f[5], f[9], float(f[-1])
        key = (primitive, impl, prop, problem)
        totals[key][0] += 1
        totals[key][1] += ms
        totals[key][2] = problem_flops(primitive, problem)
    pending = []
  if last_step is None:
    sys.exit("onednn_profile.py: fewer than two log windows; raise --steps or lower --log-every")

  steps = last_step - first_step
  wall_ms = 1000.0 * sum(windows) * args.log_every / steps
  in_onednn = sum(ms for _, ms, _ in totals.values()) / steps
  print(f"{args.model}, {args.threads} threads, steps {first_step + 1}..{last_step}; isa {isa}")
  print(f"wall {wall_ms:.2f} ms/step (with ONEDNN_VERBOSE), in oneDNN {in_onednn:.2f} ms, "
        f"outside {wall_ms - in_onednn:.2f} ms ({100 * (wall_ms - in_onednn) / wall_ms:.0f}%)\n")
  print("| primitive | impl | prop | problem | calls/step | ms/step | % step | GFLOP/s |")
  print("|---|---|---|---|---|---|---|---|")
  rows = sorted(totals.items(), key=lambda kv: -kv[1][1])
  for (primitive, impl, prop, problem), (calls, ms, flops) in rows[:args.top]:
    gflops = f"{flops * calls / (ms / 1000.0) / 1e9:.0f}" if flops and ms > 0 else ""
    print(f"| {primitive} | {impl} | {prop} | {problem[:48]} | {calls / steps:.0f} | "
          f"{ms / steps:.3f} | {100 * ms / steps / wall_ms:.1f} | {gflops} |")
  if len(rows) > args.top:
    rest = sum(ms for _, (_, ms, _) in rows[args.top:]) / steps
    print(f"| {len(rows) - args.top} more | | | | | {rest:.3f} | "
          f"{100 * rest / wall_ms:.1f} | |")


if __name__ == "__main__":
  main()
