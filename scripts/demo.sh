#!/usr/bin/env bash
# The main job: trains the Fashion-MNIST CNN on this machine, with progress on
# screen, evaluating on the 10k test images as it goes. Extra flags go to
# traind (e.g. --max-steps 6000 for 10 epochs).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
rm -rf /tmp/traind/demo
exec build/daemon/traind --model configs/models/fashion_cnn.yaml --max-steps 1200 \
  --eval-every 600 --log-every 100 --checkpoint-dir /tmp/traind/demo "$@"
