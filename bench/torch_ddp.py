#!/usr/bin/python3
"""Synchronous data-parallel training with DistributedDataParallel over gloo,
the peer of traind's sync mode (1 ps + N workers, replicas_to_aggregate N)
in distributed_compare.py: N processes, each a replica on its share of the
data; every step all-reduces the gradients (averaged) and applies them, so
each step trains on N x batch examples, as a sync traind step does.

  torch_ddp.py --rank 0 --workers 2 --port P --widths 784,300,100,10 --steps 500
  torch_ddp.py --rank 1 --workers 2 --port P --widths 784,300,100,10 --steps 500

Every rank prints one JSON line (distributed_fashion.Windows.report).
"""
import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import distributed_fashion as fashion


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--rank", type=int, required=True)
  parser.add_argument("--workers", type=int, default=2)
  parser.add_argument("--port", type=int, required=True)
  parser.add_argument("--widths", type=lambda s: [int(w) for w in s.split(",")],
                      default=[784, 300, 100, 10])
  parser.add_argument("--batch", type=int, default=100, help="per worker")
  parser.add_argument("--steps", type=int, default=500)
  parser.add_argument("--log-every", type=int, default=50)
  parser.add_argument("--learning-rate", type=float, default=0.1)
  parser.add_argument("--threads", type=int, default=1, help="compute threads of every process")
  parser.add_argument("--seed", type=int, default=42)
  args = parser.parse_args()
  fashion.set_threads(args.threads)

  dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank,
                          world_size=args.workers)
  images, labels = fashion.load_train()
  torch.manual_seed(args.seed)  # DDP also broadcasts rank 0's parameters
  model = DistributedDataParallel(fashion.mlp(args.widths))
  optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate)
  loss_fn = nn.CrossEntropyLoss()
  batches = fashion.worker_batches(images, labels, args.batch, args.rank, args.workers, args.seed)

  windows = fashion.Windows(args.log_every, args.batch)
  for _ in range(args.steps):
    x, y = next(batches)
    optimizer.zero_grad(set_to_none=False)
    loss_fn(model(x), y).backward()
    optimizer.step()
    windows.step()
  windows.report(worker=args.rank)
  dist.destroy_process_group()


if __name__ == "__main__":
  main()
