#!/usr/bin/python3
"""An asynchronous parameter server over torch.distributed.rpc, the peer of
traind's 1 ps + N workers async mode in distributed_compare.py.

The pattern of PyTorch's own example (examples/distributed/rpc/batch/
parameter_server.py) without the batching: rank 0, the ps, holds the model
and its SGD optimizer; each worker (rank 1..N) keeps a replica, computes a
gradient on its share of the data and calls update_and_fetch(grads) on the
ps, which applies it at once (under a lock: updates from different workers
do not interleave) and answers with a copy of the new parameters. Transfers
are tensors over TensorPipe, PyTorch's default RPC backend.

  torch_ps.py --rank 0 --workers 2 --port P --widths 784,300,100,10
  torch_ps.py --rank 1 --workers 2 --port P --widths 784,300,100,10 --steps 500

Every worker prints one JSON line (distributed_fashion.Windows.report).
"""
import argparse
import threading

import torch
import torch.distributed.rpc as rpc
from torch import nn

import distributed_fashion as fashion

SERVER = None  # the ParameterServer, on rank 0 only


class ParameterServer:
  def __init__(self, widths, learning_rate, seed):
    torch.manual_seed(seed)
    self.model = fashion.mlp(widths)
    self.optimizer = torch.optim.SGD(self.model.parameters(), lr=learning_rate)
    self.lock = threading.Lock()

  def parameters(self):
    with self.lock:
      return [p.detach().clone() for p in self.model.parameters()]

  def apply(self, gradients):
    with self.lock:
      for p, g in zip(self.model.parameters(), gradients):
        p.grad = g
      self.optimizer.step()
      # A copy: the reply is sent after the lock is released and must not
      # tear under the next worker's update.
      return [p.detach().clone() for p in self.model.parameters()]


def fetch():
  return SERVER.parameters()


def update_and_fetch(gradients):
  return SERVER.apply(gradients)


def run_worker(args):
  images, labels = fashion.load_train()
  model = fashion.mlp(args.widths)
  loss_fn = nn.CrossEntropyLoss()
  batches = fashion.worker_batches(images, labels, args.batch, args.rank - 1, args.workers,
                                   args.seed)

  def load(values):
    with torch.no_grad():
      for p, v in zip(model.parameters(), values):
        p.copy_(v)

  load(rpc.rpc_sync("ps", fetch))
  windows = fashion.Windows(args.log_every, args.batch)
  for _ in range(args.steps):
    x, y = next(batches)
    model.zero_grad(set_to_none=False)
    loss_fn(model(x), y).backward()
    load(rpc.rpc_sync("ps", update_and_fetch, args=([p.grad for p in model.parameters()],)))
    windows.step()
  windows.report(worker=args.rank - 1)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--rank", type=int, required=True, help="0: the ps; 1..N: workers")
  parser.add_argument("--workers", type=int, default=2)
  parser.add_argument("--port", type=int, required=True)
  parser.add_argument("--widths", type=lambda s: [int(w) for w in s.split(",")],
                      default=[784, 300, 100, 10])
  parser.add_argument("--batch", type=int, default=100)
  parser.add_argument("--steps", type=int, default=500, help="steps of each worker")
  parser.add_argument("--log-every", type=int, default=50)
  parser.add_argument("--learning-rate", type=float, default=0.1)
  parser.add_argument("--threads", type=int, default=1, help="compute threads of every process")
  parser.add_argument("--seed", type=int, default=42)
  parser.add_argument("--tcp", action="store_true",
                      help="TensorPipe over TCP only (default: its choice, shared memory here)")
  args = parser.parse_args()
  fashion.set_threads(args.threads)

  options = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{args.port}")
  if args.tcp:
    # TensorPipe's TCP transport and its basic channel only: on one host it
    # would otherwise move tensors through shared memory, as no network can.
    options = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{args.port}",
                                              _transports=["uv"], _channels=["basic"])
  name = "ps" if args.rank == 0 else f"worker{args.rank - 1}"
  if args.rank == 0:
    global SERVER
    SERVER = ParameterServer(args.widths, args.learning_rate, args.seed)
  rpc.init_rpc(name, rank=args.rank, world_size=args.workers + 1, rpc_backend_options=options)
  if args.rank > 0:
    run_worker(args)
  rpc.shutdown()  # waits for every rank: the ps serves until the workers are done


if __name__ == "__main__":
  main()
