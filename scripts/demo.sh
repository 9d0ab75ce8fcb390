#!/usr/bin/env bash
# The main job: a small local cluster — 1 parameter server and 2 workers,
# each its own traind process on 127.0.0.1 — trains the Fashion-MNIST CNN
# asynchronously for 2 epochs, with progress on screen and test accuracy as
# it goes. Extra flags go to every node (e.g. --max-steps 6000). Ctrl-C stops
# the cluster cleanly; running it again resumes from the checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec scripts/run-local-cluster configs/clusters/local_async.yaml configs/models/fashion_cnn.yaml \
  --max-steps 1200 --eval-every 400 --log-every 100 --threads 1 \
  --checkpoint-dir /tmp/traind/demo "$@"
