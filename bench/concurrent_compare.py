#!/usr/bin/env python3
"""training.concurrent_steps (K steps in flight on the same devices) side by
side with K = 1, in one invocation per section, with ratios.

  python3 bench/concurrent_compare.py --build-dir build mlp   # standalone K = 1, 2, 4
  python3 bench/concurrent_compare.py --build-dir build cnn   # 1 ps + 1 worker K = 1, 2 vs standalone
  python3 bench/concurrent_compare.py --build-dir build distant  # 1 ps + 1 worker, long round trip

mlp   fashion_mlp, batch 100, standalone traind --threads T (default 2):
      concurrent_steps 1, 2 and 4 (each step a T / K share of the threads,
      at least one). Ratio: examples/sec against K = 1.
distant  fashion_mlp, 1 ps + 1 async worker (--threads T) over a long link:
      the ps and the worker each in a network namespace of their own, joined
      by a veth pair, the worker reaching the ps through
      bench/delay_forwarder.py, which delays every byte by --delay-ms each
      way (the VMs here have no netem). concurrent_steps 1, 2 and 4: with
      K > 1 the steps' push+pulls overlap (docs/distributed.md, "Concurrent
      steps"). Ratio: examples/sec against K = 1. Needs root and `ip`.
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
import contextlib
import os
import subprocess
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


def print_against_k1(args, title, results):
  """The table of run_sides' results, each side against the one named "... K = 1"."""
  dc.header(title, args)
  print(f"  {'':44s} {'examples/sec':24s} {'ratio':6s}")
  base = next(r for name, r in results.items() if name.endswith("K = 1"))
  for name, (rates, others) in results.items():
    dc.print_row(args, name, rates, others, None if name.endswith("K = 1") else base)
  print("  ratio: against K = 1")


def section_mlp(args, tmp):
  steps, log_every, threads = args.mlp_steps, args.mlp_steps // 6, args.threads
  models = {k: with_concurrent_steps(tmp, dc.FASHION_MLP, k) for k in (1, 2, 4)}
  sides = {f"standalone K = {k}": (lambda m=m: dc.run_standalone(args, m, steps, log_every,
                                                                 threads))
           for k, m in models.items()}
  results = run_sides(args, sides)
  print_against_k1(args, f"fashion_mlp, batch 100, {steps} steps, windows of {log_every} steps: "
                   f"standalone --threads {threads}, concurrent_steps K (each step max(1, "
                   f"{threads} / K) threads)", results)


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


@contextlib.contextmanager
def two_hosts(tmp, delay_ms):
  """A ps host and a worker host: network namespaces joined by a veth pair.
  Yields (cluster spec, argv prefix of the ps host, of the worker host,
  the forwarder's argv). The spec names the ps `psnode`: on the ps host the
  veth's address, on the worker host 127.0.0.1, where the forwarder
  listens and passes everything on to the ps host, delay_ms later each
  way (/etc/netns/NAME/hosts, which `ip netns exec` puts over /etc/hosts)."""
  tag = f"tdc{os.getpid() % 100000}"
  ps_ns, worker_ns = f"{tag}ps", f"{tag}w"
  net = f"10.219.{os.getpid() % 250}"
  ps_port, worker_port = dc.free_ports(2)

  def ip(*argv):
    subprocess.run(["ip", *argv], check=True, stderr=subprocess.PIPE, text=True)

  try:
    setting_up = True
    ip("netns", "add", ps_ns)
    ip("netns", "add", worker_ns)
    ip("link", "add", f"{tag}a", "type", "veth", "peer", "name", f"{tag}b")
    ip("link", "set", f"{tag}a", "netns", worker_ns)
    ip("link", "set", f"{tag}b", "netns", ps_ns)
    for ns, dev, host in ((worker_ns, f"{tag}a", 1), (ps_ns, f"{tag}b", 2)):
      ip("-n", ns, "addr", "add", f"{net}.{host}/24", "dev", dev)
      ip("-n", ns, "link", "set", dev, "up")
      ip("-n", ns, "link", "set", "lo", "up")
    hosts = {ps_ns: f"127.0.0.1 localhost\n{net}.2 psnode\n{net}.1 workernode\n",
             worker_ns: "127.0.0.1 localhost psnode workernode\n"}
    for ns, text in hosts.items():
      os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
      with open(f"/etc/netns/{ns}/hosts", "w") as f:
        f.write(text)
    cluster = os.path.join(tmp, f"cluster_distant_{delay_ms}.yaml")
    with open(cluster, "w") as f:
      f.write(f"cluster:\n  ps: [psnode:{ps_port}]\n  worker: [workernode:{worker_port}]\n"
              "training:\n  mode: async\ntransport:\n  shared_memory: off\n")
    forwarder = [sys.executable, os.path.join(dc.REPO, "bench", "delay_forwarder.py"),
                 f"127.0.0.1:{ps_port}", f"{net}.2:{ps_port}", str(delay_ms)]
    setting_up = False
    yield (cluster, ["ip", "netns", "exec", ps_ns], ["ip", "netns", "exec", worker_ns],
           ["ip", "netns", "exec", worker_ns] + forwarder)
  except subprocess.CalledProcessError as e:
    if not setting_up:
      raise
    sys.exit(f"concurrent_compare.py distant: {' '.join(e.cmd)} failed (needs root and `ip` "
             f"with network namespaces): {e.stderr.strip()}")
  finally:
    # A veth pair still in this namespace (its move failed) goes with its end.
    subprocess.run(["ip", "link", "del", f"{tag}a"], stderr=subprocess.DEVNULL)
    for ns in (ps_ns, worker_ns):
      subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
      for remove, path in ((os.remove, f"/etc/netns/{ns}/hosts"), (os.rmdir, f"/etc/netns/{ns}")):
        with contextlib.suppress(OSError):
          remove(path)


def run_distant(args, hosts, model, steps, log_every, threads):
  """1 ps + 1 async worker on two_hosts(): the worker's examples/sec
  (median window) and others' CPU."""
  cluster, on_ps_host, on_worker_host, forwarder = hosts
  flags = dc.traind_flags(steps, log_every, threads)
  job = dc.Job(f"traind across a long link {os.path.basename(model)}")
  common = [args.traind, "--cluster", cluster, "--model", model]
  with dc.bench_lock():
    job.start("forwarder", forwarder, dict(os.environ), background=True)
    job.start("ps", on_ps_host + common + ["--job", "ps", "--task", "0"] + flags,
              dc.env_with_threads(1))
    job.start("worker 0", on_worker_host + common + ["--job", "worker", "--task", "0"] + flags,
              dc.env_with_threads(threads))
    outputs, _, others, _, _ = job.wait()
  return dc.window_rate(outputs["worker 0"], job.name), others


def section_distant(args, tmp):
  steps, log_every, threads = args.distant_steps, args.distant_steps // 6, args.threads
  models = {k: with_concurrent_steps(tmp, dc.FASHION_MLP, k) for k in (1, 2, 4)}
  with two_hosts(tmp, args.delay_ms) as hosts:
    sides = {f"1 ps + 1 worker K = {k}": (lambda m=m: run_distant(args, hosts, m, steps,
                                                                  log_every, threads))
             for k, m in models.items()}
    results = run_sides(args, sides)
  print_against_k1(args, f"fashion_mlp, batch 100, {steps} steps, windows of {log_every} steps: "
                   f"1 ps + 1 async worker (--threads {threads}) across a link of "
                   f"{2 * args.delay_ms} ms round trip (bench/delay_forwarder.py between network "
                   "namespaces), concurrent_steps K", results)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("sections", nargs="+", choices=["mlp", "cnn", "distant"])
  dc.add_run_options(parser, rounds=3)
  parser.add_argument("--threads", type=int, default=2,
                      help="compute threads of standalone traind and of the worker")
  parser.add_argument("--mlp-steps", type=int, default=1200)
  parser.add_argument("--cnn-steps", type=int, default=300)
  parser.add_argument("--distant-steps", type=int, default=120)
  parser.add_argument("--delay-ms", type=int, default=50,
                      help="distant: the forwarder's delay each way (round trip: twice it)")
  args = dc.parse_run_options(parser, "concurrent_compare.py")
  with tempfile.TemporaryDirectory(prefix="concurrent_compare.") as tmp:
    for section in args.sections:
      if section == "mlp":
        section_mlp(args, tmp)
      elif section == "cnn":
        section_cnn(args, tmp)
      else:
        section_distant(args, tmp)
      sys.stdout.flush()


if __name__ == "__main__":
  main()
