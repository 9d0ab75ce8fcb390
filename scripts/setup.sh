#!/usr/bin/env bash
# Installs what traind's build, tests and demo need on Debian bookworm, and
# nothing when it is all there already. Run as root (or with sudo available).
#   scripts/setup.sh          build + test + demo dependencies
#   scripts/setup.sh --test   also what the systemd test boots its container with
#   scripts/setup.sh --bench  also the PyTorch peer for bench/
#   scripts/setup.sh --tensorflow
#                             also TensorFlow, in a virtual environment of its
#                             own, for test/tensorflow_reference.py
set -euo pipefail

# ocl-icd-opencl-dev: Debian's oneDNN is built with the OpenCL GPU runtime, and
# its CMake config fails without OpenCL's headers and library; apt only
# recommends them, and recommends are not installed here.
packages=(
  build-essential cmake ninja-build pkg-config git
  libasio-dev capnproto libcapnp-dev libdnnl-dev ocl-icd-opencl-dev
  libyaml-cpp-dev libspdlog-dev
  catch2 libcli11-dev zlib1g-dev libpng-dev libjpeg62-turbo-dev libprotobuf-dev protobuf-compiler
  dataset-fashion-mnist
  python3 python3-numpy python3-pip
)
tensorflow=0
for option in "$@"; do
  case $option in
    # test/systemd_nspawn_test.sh boots a Debian rootfs under systemd-nspawn
    # to run traind@.service under a real systemd (recommends stay out:
    # libnss-mymachines would edit this host's nsswitch.conf).
    --test) packages+=(systemd-container debootstrap) ;;
    # Debian's torch 1.13 runs dense layers on the reference BLAS unless
    # OpenBLAS is there; the OpenMP build, since the pthread one fights torch's threads.
    --bench) packages+=(python3-torch libopenblas0-openmp) ;;
    --tensorflow) packages+=(python3-venv); tensorflow=1 ;;
    *) echo "setup.sh: unknown option $option (--test, --bench, --tensorflow)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The safetensors interoperability test reads traind's checkpoints with the
# reference Python implementation; python3 on PATH may be another interpreter
# than Debian's, so install it for that one.
if ! python3 -c "import safetensors, numpy" 2>/dev/null; then
  python3 -m pip install -q safetensors numpy 2>/dev/null ||
    python3 -m pip install -q --break-system-packages safetensors numpy
fi

# The TensorBoard test reads traind's event files with the tensorboard
# package itself, into the same python3.
if ! python3 -c "import tensorboard" 2>/dev/null; then
  python3 -m pip install -q tensorboard 2>/dev/null ||
    python3 -m pip install -q --break-system-packages tensorboard
fi

# TensorFlow (1.6 GB installed) goes into a virtual environment of its own,
# where its numpy cannot replace the one Debian's torch was built against;
# test/CMakeLists.txt finds it there.
if ((tensorflow)); then
  venv="$HOME/.cache/traind/tensorflow"
  if ! "$venv/bin/python3" -c "import tensorflow, tf_keras, safetensors, numpy" 2>/dev/null; then
    echo "setup: installing TensorFlow into $venv"
    python3 -m venv "$venv"
    # The version the reference was checked with: Keras' optimizers have
    # changed under tf.keras before (docs/model-spec.md, "Which TensorFlow
    # optimizer").
    # tf_keras: Keras 2, whose checkpoints trainctl import takes as well.
    "$venv/bin/python3" -m pip install -q "tensorflow-cpu==2.21.*" "tf_keras==2.21.*" \
      safetensors numpy
  fi
fi
