#!/usr/bin/env python3
"""Loading a TFRecord data set of JPEG photographs: traind against
TensorFlow's own input pipeline, side by side in one invocation.

The set is Fashion-MNIST's 60000 training images, each scaled to 32 x 32
and stored as a JPEG (quality 90) under `image/encoded`, with its class
under `image/class/label`, in 4 files, as TensorFlow 1's
build_image_data.py writes a job's photographs. It is written once into
--data-dir.

Each round times, in turn:
- traind: `traind check` of a model spec whose data.train reads the files
  with `resize: bilinear` to [28, 28, 1]; the whole process, which reads
  every record, decodes and resizes every image, and keeps them;
- TensorFlow: tf.data over the same files, parse_single_example,
  tf.io.decode_jpeg(channels=1), tf.image.resize to [28, 28] and / 255,
  iterated to the end in this process on one thread (traind's loader is
  one thread), TensorFlow's import and start-up not counted.

Run with TensorFlow's virtual environment (scripts/setup.sh --tensorflow):

    ~/.cache/traind/tensorflow/bin/python3 bench/data_loading.py --traind build/daemon/traind
"""

import argparse
import gzip
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
FILES = 4
SIZE = 32  # the stored images' height and width
INPUT = 28  # the model's


def read_idx(name, header):
    with gzip.open(os.path.join(FASHION_MNIST, name)) as f:
        return np.frombuffer(f.read()[header:], np.uint8)


def write_data(directory):
    """The JPEG set, unless --data-dir holds it already."""
    paths = [os.path.join(directory, f"train-{i:05d}-of-{FILES:05d}") for i in range(FILES)]
    if all(os.path.exists(p) for p in paths):
        return paths
    os.makedirs(directory, exist_ok=True)
    images = read_idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28, 1)
    labels = read_idx("train-labels-idx1-ubyte.gz", 8)
    per_file = len(images) // FILES
    for i, path in enumerate(paths):
        with tf.io.TFRecordWriter(path + ".partial") as writer:
            for j in range(i * per_file, (i + 1) * per_file):
                scaled = tf.cast(tf.round(tf.image.resize(images[j], [SIZE, SIZE])), tf.uint8)
                jpeg = tf.io.encode_jpeg(scaled, quality=90).numpy()
                writer.write(tf.train.Example(features=tf.train.Features(feature={
                    "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg])),
                    "image/class/label": tf.train.Feature(
                        int64_list=tf.train.Int64List(value=[int(labels[j])]))})
                ).SerializeToString())
        os.replace(path + ".partial", path)
    return paths


def spec_text(directory):
    return (f"input: [{INPUT}, {INPUT}, 1]\n"
            "layers: [{type: flatten}, {type: dense, units: 10}]\n"
            "optimizer: {type: sgd, learning_rate: 0.1}\n"
            "data:\n"
            f"  train: {{tfrecords: {directory}/train-*-of-{FILES:05d}, "
            "image_feature: image/encoded, label_feature: image/class/label, resize: bilinear}\n"
            "  batch_size: 100\n"
            "training: {epochs: 1}\n")


def time_traind(traind, spec):
    start = time.perf_counter()
    result = subprocess.run([traind, "check", "--model", spec], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0 or "60000 training examples" not in result.stdout + result.stderr:
        sys.exit(f"traind check failed:\n{result.stdout}{result.stderr}")
    return seconds


def time_tensorflow(paths):
    features = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/class/label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        example = tf.io.parse_single_example(record, features)
        image = tf.io.decode_jpeg(example["image/encoded"], channels=1)
        return tf.image.resize(image, [INPUT, INPUT]) / 255.0, example["image/class/label"]

    start = time.perf_counter()
    count = 0
    for images, _ in tf.data.TFRecordDataset(paths).map(parse).batch(1000):
        count += int(images.shape[0])
    seconds = time.perf_counter() - start
    if count != 60000:
        sys.exit(f"TensorFlow read {count} examples")
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traind", required=True, help="the traind binary")
    parser.add_argument("--data-dir", default=os.path.expanduser("~/.cache/traind/jpeg-fashion"),
                        help="where the JPEG set is written once")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    paths = write_data(args.data_dir)
    with tempfile.TemporaryDirectory() as work:
        spec = os.path.join(work, "spec.yaml")
        with open(spec, "w") as f:
            f.write(spec_text(args.data_dir))
        time_traind(args.traind, spec)  # warm the page cache for both
        traind, tensorflow = [], []
        for _ in range(args.rounds):
            traind.append(time_traind(args.traind, spec))
            tensorflow.append(time_tensorflow(paths))
    t, p = statistics.median(traind), statistics.median(tensorflow)
    print(f"60000 JPEG images of {SIZE}x{SIZE} resized to {INPUT}x{INPUT}, "
          f"median of {args.rounds} rounds [min-max]:")
    print(f"  traind check (whole process)   {t:6.2f} s [{min(traind):.2f}-{max(traind):.2f}]")
    print(f"  TensorFlow tf.data, 1 thread   {p:6.2f} s [{min(tensorflow):.2f}-"
          f"{max(tensorflow):.2f}]")
    print(f"  traind / TensorFlow time: {t / p:.2f}")


if __name__ == "__main__":
    main()
