#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (unit, integration,
# interoperability) with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
scripts/build.sh
cd build
ctest --output-on-failure -j2 --timeout 900
