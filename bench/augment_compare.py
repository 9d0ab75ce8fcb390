#!/usr/bin/env python3
"""Random crops of photographs of their own sizes: traind's training
batches against TensorFlow's tf.data doing the same, side by side in one
invocation.

The set is --images JPEG photographs (quality 90) of sizes drawn from 300
to 500 pixels a side, RGB, under `image/encoded`, with a class under
`image/class/label`, in one uncompressed TFRecord file, as TensorFlow 1's
build_image_data.py writes ImageNet. It is written once into --data-dir.
The pictures are smooth colour fields with noise, which JPEG compresses
about as it does photographs (40-60 KB an image).

Two crops, each to 224 x 224 x 3, then a random left-right flip, / 255:
- boxes: Inception's (inception_preprocessing.distorted_bounding_box_crop):
  a box of random area [0.08, 1] and aspect ratio [0.75, 1.33] of each
  image as decoded, resized to the window with TensorFlow 1's centres.
  traind: `random_crop: {size: [224, 224], area: [0.08, 1], aspect_ratio:
  [0.75, 1.33]}` of a set with `resize: legacy_bilinear, in_memory: false`.
  TensorFlow: tf.image.sample_distorted_bounding_box (no object boxes,
  min_object_covered 0, 100 tries), tf.slice, ResizeBilinear
  (align_corners=False, TensorFlow 1's resize_bilinear).
- scales: VGG's (vgg_preprocessing.preprocess_for_train): each image resized
  in proportion to a shorter side drawn in [256, 512], a random window of
  224 x 224 of that. traind: `random_crop: {size: [224, 224], shorter_side:
  [256, 512]}`. TensorFlow: tf.random.uniform side, resize_bilinear of the
  whole image (as slim does), tf.image.random_crop.

Each round times, in turn, one epoch of batches of 32 on one thread:
- traind: build/bench/augment_throughput (the input pipeline as a run has
  it with prefetch_batches: 0, every image read at its offset, decoded,
  cropped, resized, flipped), its load not counted;
- TensorFlow: TFRecordDataset, parse_single_example, the crop, batch(32),
  iterated on a private thread pool of one thread, intra-op parallelism 1,
  no prefetch injected and no autotuning; its first batch untimed too.

The figure is images per second, the median over the rounds, and traind's
as a multiple of TensorFlow's. Run with TensorFlow's virtual environment
(scripts/setup.sh --tensorflow):

    ~/.cache/traind/tensorflow/bin/python3 bench/augment_compare.py --build-dir build
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow's import
import tensorflow as tf  # noqa: E402

WINDOW = 224
BATCH = 32
AREA = (0.08, 1.0)
ASPECT = (0.75, 1.33)
SIDES = (256, 512)


def write_data(directory, images):
    """The photographs, unless --data-dir holds them already."""
    path = os.path.join(directory, f"photos-{images}.tfrecord")
    if os.path.exists(path):
        return path
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(7)
    with tf.io.TFRecordWriter(path + ".partial") as writer:
        for i in range(images):
            height, width = (int(s) for s in rng.integers(300, 501, size=2))
            # A smooth field: a coarse grid of colours, enlarged, and noise.
            coarse = rng.uniform(0, 255, size=(6, 6, 3)).astype(np.float32)
            field = tf.image.resize(coarse, [height, width]).numpy()
            field += rng.normal(0, 12, size=field.shape)
            pixels = np.clip(field, 0, 255).astype(np.uint8)
            encoded = tf.io.encode_jpeg(pixels, quality=90).numpy()
            example = tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 10])),
            }))
            writer.write(example.SerializeToString())
    os.replace(path + ".partial", path)
    return path


def spec_text(path, crop):
    random_crop = (f"{{size: [{WINDOW}, {WINDOW}], area: [{AREA[0]}, {AREA[1]}], "
                   f"aspect_ratio: [{ASPECT[0]}, {ASPECT[1]}]}}" if crop == "boxes" else
                   f"{{size: [{WINDOW}, {WINDOW}], shorter_side: [{SIDES[0]}, {SIDES[1]}]}}")
    return (f"input: [{WINDOW}, {WINDOW}, 3]\n"
            "layers: [{type: flatten}, {type: dense, units: 10}]\n"
            "optimizer: {type: sgd, learning_rate: 0.1}\n"
            "data:\n"
            f"  train: {{tfrecords: {path}, image_feature: image/encoded, "
            "label_feature: image/class/label, resize: legacy_bilinear, in_memory: false}\n"
            f"  batch_size: {BATCH}\n"
            "  shuffle: false\n"
            f"  augment: {{random_crop: {random_crop}, flip_left_right: true}}\n"
            "training: {epochs: 1}\n")


def time_traind(binary, spec):
    out = subprocess.run([binary, "--model", spec], check=True, capture_output=True,
                         text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return result["images"] / result["seconds"]


def decode(record):
    features = tf.io.parse_single_example(record, {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    })
    return tf.io.decode_jpeg(features["image/encoded"], channels=3), features["image/class/label"]


def inception_box(record):
    image, label = decode(record)
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        tf.shape(image), bounding_boxes=tf.zeros([1, 0, 4]), min_object_covered=0.0,
        aspect_ratio_range=ASPECT, area_range=AREA, max_attempts=100,
        use_image_if_no_bounding_boxes=True)
    box = tf.slice(image, begin, size)
    window = tf.raw_ops.ResizeBilinear(images=box[None], size=[WINDOW, WINDOW])[0]
    return tf.image.random_flip_left_right(window) / 255.0, label


def vgg_scale(record):
    image, label = decode(record)
    side = tf.random.uniform([], SIDES[0], SIDES[1] + 1, dtype=tf.int32)
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = tf.cast(side, tf.float32) / tf.reduce_min(shape)
    size = tf.cast(tf.math.rint(shape * scale), tf.int32)
    resized = tf.raw_ops.ResizeBilinear(images=image[None], size=size)[0]
    window = tf.image.random_crop(resized, [WINDOW, WINDOW, 3])
    return tf.image.random_flip_left_right(window) / 255.0, label


def time_tensorflow(path, crop, images):
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    # Nothing on a thread of its own: no prefetch injected, no autotuning.
    options.autotune.enabled = False
    options.experimental_optimization.inject_prefetch = False
    dataset = (tf.data.TFRecordDataset(path)
               .map(inception_box if crop == "boxes" else vgg_scale)
               .batch(BATCH, drop_remainder=True)
               .repeat()
               .with_options(options))
    # As augment_throughput: the first batch untimed, then an epoch's.
    batches = iter(dataset)
    next(batches)
    start = time.perf_counter()
    for _ in range(images // BATCH):
        next(batches)
    return images // BATCH * BATCH / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", required=True, help="traind's build directory")
    parser.add_argument("--data-dir", default=os.path.expanduser("~/.cache/traind/photos"),
                        help="where the photographs are written once")
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("crops", nargs="*", help="boxes, scales or both (the default)")
    args = parser.parse_args()
    crops = args.crops or ["boxes", "scales"]
    if any(crop not in ("boxes", "scales") for crop in crops):
        parser.error(f"expected crops among boxes and scales, got {' '.join(crops)}")
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    binary = os.path.join(args.build_dir, "bench", "augment_throughput")
    path = write_data(args.data_dir, args.images)
    print(f"{args.images} JPEG photographs of 300-500 a side ({os.path.getsize(path) >> 20} MiB), "
          f"batches of {BATCH}, one thread each, {args.rounds} rounds, TensorFlow {tf.__version__}")
    print(f"{'crop':8} {'traind img/s':>14} {'TensorFlow img/s':>17} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as scratch:
        for crop in crops:
            spec = os.path.join(scratch, f"{crop}.yaml")
            with open(spec, "w") as f:
                f.write(spec_text(path, crop))
            time_tensorflow(path, crop, args.images)  # untimed: TensorFlow traces its functions
            traind, tensorflow = [], []
            for _ in range(args.rounds):
                traind.append(time_traind(binary, spec))
                tensorflow.append(time_tensorflow(path, crop, args.images))
            ours, theirs = statistics.median(traind), statistics.median(tensorflow)
            print(f"{crop:8} {ours:14.0f} {theirs:17.0f} {ours / theirs:6.2f}"
                  f"   (traind {min(traind):.0f}-{max(traind):.0f}, "
                  f"TensorFlow {min(tensorflow):.0f}-{max(tensorflow):.0f})")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
