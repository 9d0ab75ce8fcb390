#!/usr/bin/env python3
"""traind trains as TensorFlow does.

    tensorflow_reference.py --traind build/daemon/traind [--work-dir DIR] [--steps N]

Each check trains a small model twice for --steps steps (30 by default),
from the same initial parameters (a TensorFlow checkpoint that traind's
init_from reads) on the same batches (the first
Fashion-MNIST training examples, or traind's synthetic regression data
regenerated here, in order): once with traind, once with TensorFlow's ops
and optimizers. traind's final checkpoint must hold what TensorFlow ends
with, parameter by parameter, optimizer slot by slot (`<variable>/momentum`,
`accumulator`, `m`, `v`, `rms`, `mg`) and moving average by moving average,
to float32 rounding:

  optimizers      sgd (and weight_decay), momentum and Nesterov momentum under
                  an exponentially decaying rate, adagrad with its own
                  initial_accumulator and epsilon, adam with traind's defaults
                  and with others, rmsprop at its defaults, with momentum under
                  a decaying rate, centered and as Keras' (initial_rms 0); a
                  784-32-10 perceptron
  layers          conv2d (same and valid padding, strides, uneven and
                  non-square kernels), max_pool and avg_pool (same and valid),
                  relu, tanh, sigmoid, linear, dense without a bias; two CNNs
  clipping        clip_global_norm with sgd, with adam and weight_decay, on
                  towers, and on each worker of a sync cluster
  label smoothing softmax_cross_entropy with label_smoothing 0.2
  mse             the synthetic regression data, one tanh layer
  tfrecords       the same examples written by TensorFlow's TFRecordWriter
                  (GZIP, ZLIB, raw; images as convert_to_records.py's
                  features and as tensorflow_datasets' PNG images,
                  regression as float features) and read by traind's
                  data.train.tfrecords; and as build_image_data.py's JPEG
                  photographs of many sizes, against TensorFlow's own
                  tf.image.resize(tf.io.decode_jpeg(...)) pipeline and
                  TensorFlow 1's tf.image.resize_images
  schedules       exponential and inverse-time decay with staircase,
                  piecewise_constant, polynomial decay cycling, cosine decay
  moving averages with and without num_updates
  placement       towers on 2 CPU devices, and a pipeline of 2 stages over 4
                  micro-batches, against one TensorFlow step of the batch
  sync cluster    1 ps and 2 workers, replicas_to_aggregate 2, Adam and
                  centered RMSProp, against one TensorFlow step over both
                  workers' batches
  import          a TensorFlow 1 graph trains --steps steps and saves with its
                  Saver; `trainctl import` takes its checkpoint over and traind
                  trains --steps more, against TensorFlow training on from
                  where it saved: adam with a moving average and rmsprop with
                  the kernels partitioned (as a ps job's partitioner leaves
                  them), centered rmsprop with momentum (and a spec without
                  centered refused), nesterov under an exponential decay,
                  tf.compat.v1's adagrad; and a Sequential model trained
                  in a GradientTape loop, saved with its optimizer by
                  tf.train.Checkpoint, taken over through the checkpoint's
                  object graph: Keras 3's Adam (and under a
                  LossScaleOptimizer), centered RMSprop with momentum,
                  Adagrad and SGD with Nesterov momentum (lists),
                  Keras 2.11's (tf_keras.optimizers) Adam, RMSprop with
                  momentum and SGD with momentum (lists named after the
                  variables), and Keras 2's (tf_keras.optimizers.legacy)
                  Adam, RMSprop with momentum, Adagrad and SGD with
                  momentum (slot variables)
  export          the other way: traind trains --steps steps, `trainctl
                  export` writes its checkpoint as the job's, the job's graph
                  restores it with its Saver and trains --steps more, against
                  traind training on from its own checkpoint; the same jobs
  initializers    glorot_uniform, glorot_normal, he_uniform, he_normal,
                  truncated_normal and random_normal of a deviation: the
                  largest value and the standard deviation of traind's draws
                  against those of Keras' initializers (a law, not values)

What each traind rule is in TensorFlow, and so what this script runs:

  sgd             tf.compat.v1.train.GradientDescentOptimizer
  momentum        tf.compat.v1.train.MomentumOptimizer(use_nesterov=nesterov):
                  accumulator = momentum * accumulator + g, then
                  var -= rate * accumulator, or with Nesterov
                  var -= rate * (g + momentum * accumulator)
  adagrad         TensorFlow's ApplyAdagradV2 kernel (tf.raw_ops.
                  ResourceApplyAdagradV2, what tf.keras 2's Adagrad ran):
                  accumulator += g * g,
                  var -= rate * g / (sqrt(accumulator) + epsilon)
  adam            tf.compat.v1.train.AdamOptimizer, given traind's epsilon
                  (1e-7 by default)
  rmsprop         tf.compat.v1.train.RMSPropOptimizer (rms starts at 1,
                  epsilon inside the root), traind's defaults being its own;
                  with another initial_rms (Keras' RMSprop starts at 0), its
                  kernel ApplyRMSProp (tf.raw_ops.ResourceApplyRMSProp)
  weight_decay    the loss plus weight_decay * tf.nn.l2_loss(kernel) for each
                  kernel (no bias): gradient += weight_decay * kernel, for
                  every optimizer (L2, not Keras' decoupled weight decay); a
                  layer's own weight_decay in place of the optimizer's
  clip_global_norm
                  tf.clip_by_global_norm of that gradient (the penalty's
                  included), on each sync worker's share of the batch before
                  their mean
  learning_rate   tf.compat.v1.train.exponential_decay, inverse_time_decay,
                  piecewise_constant, polynomial_decay, cosine_decay of the
                  global step before the update
  moving_average  tf.train.ExponentialMovingAverage, its averages made at the
                  initial values, num_updates the global step after the update
  initializers    tf.keras.initializers.GlorotUniform, GlorotNormal,
                  HeUniform, HeNormal (VarianceScaling: a normal truncated at
                  two deviations, widened so that its deviation is sqrt(scale));
                  TruncatedNormal(stddev) (truncated, not widened),
                  RandomNormal(stddev)
  layers, losses  tf.nn.conv2d, max_pool2d, avg_pool2d (padding left out of
                  the average), tf.matmul, relu, tanh, sigmoid; the mean of
                  sparse_softmax_cross_entropy_with_logits, the mean square;
                  tf.compat.v1.losses.softmax_cross_entropy(label_smoothing)

Where TensorFlow's other variants of these differ from traind (and from this
script's reference; docs/model-spec.md, "Which TensorFlow optimizer", says
the same to users):

  - tf.compat.v1.train.AdagradOptimizer has no epsilon: var -= rate * g /
    sqrt(accumulator).
  - The Keras 2 optimizer's Adagrad of TensorFlow 2.11 on (tf_keras; the
    legacy one keeps the kernel's rule) and Keras 3's (tf.keras since
    TensorFlow 2.16) divide by sqrt(accumulator + epsilon).
  - tf.compat.v1.train.AdamOptimizer's default epsilon is 1e-8; Keras' and
    traind's 1e-7.
  - Keras' SGD(momentum) under a decaying rate keeps accumulator =
    momentum * accumulator - rate_t * g: each gradient is scaled by the rate
    of its own step, where v1 Momentum (and traind) scale the whole
    accumulator by the current rate.

Exits 0 when every check matches, printing a table of each check's largest
differences; 1 when traind fails or a tensor differs, naming the check, the
tensor, the differences and the tolerance; 77 (ctest's skip) when Python
lacks tensorflow, tf_keras, numpy or safetensors.
"""
import argparse
import dataclasses
import gzip
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter
try:
    import numpy as np
    import tensorflow as tf
    import tf_keras  # noqa: F401 (Keras 2, for the Keras 2 imports)
    from safetensors.numpy import load_file
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

v1 = tf.compat.v1.train

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
SEED = 42
# traind starts from TensorFlow's initial values through a TensorFlow
# checkpoint, as a TensorFlow 1 model's variables are named: under a scope.
INITIAL_SCOPE = "reference"
BATCH_SIZE = 16
TRAIND_TIMEOUT_SECONDS = 120

# The largest difference a tensor may show, relative to its largest value:
# max|traind - TensorFlow| / max|TensorFlow|. Both train in float32 but sum in
# other orders (oneDNN's and Eigen's blocked matrix products and
# convolutions, sums over the batch), so every step's results differ in
# their last bits (2^-24, 6e-8 of a value); the steps after carry these on,
# and Adam's division by sqrt(v) magnifies them where v is tiny. Over 30 or
# 60 steps the worst is 4e-6 (Adam at its default epsilon); 1e-4 leaves room
# for longer runs and other machines' kernels. Of the real differences the
# controls made, the smallest is 2e-3 (moving averages with num_updates a
# step late); Nesterov for plain momentum, the rate of the step after and
# Keras 3's Adagrad make 0.1 or more.
TOLERANCE = 1e-4

# traind's defaults for what an optimizer section leaves out (docs/model-spec.md).
OPTIMIZER_DEFAULTS = {
    "sgd": {},
    "momentum": {"momentum": 0.9, "nesterov": False},
    "adagrad": {"initial_accumulator": 0.1, "epsilon": 1e-7},
    "adam": {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7},
    "rmsprop": {"rho": 0.9, "momentum": 0.0, "epsilon": 1e-10, "centered": False,
                "initial_rms": 1.0},
}

ACTIVATIONS = {"relu": tf.nn.relu, "tanh": tf.nn.tanh, "sigmoid": tf.nn.sigmoid,
               "linear": tf.identity}


class Failure(Exception):
    """A check that failed: traind did not train, or a tensor differs."""


@dataclasses.dataclass
class Row:
    """One line of the result table: a check's largest differences."""
    check: str
    tensor: str
    abs_diff: float
    rel_diff: float
    tolerance: float


# --- Training data ----------------------------------------------------------


@dataclasses.dataclass
class Examples:
    """Training examples in the order traind takes them (shuffle off), and
    the model spec's data section that has traind read the same."""
    inputs: np.ndarray
    targets: np.ndarray
    input_shape: list
    data_section: dict

    def batches(self, steps, batch_size):
        return [(self.inputs[i * batch_size:(i + 1) * batch_size],
                 self.targets[i * batch_size:(i + 1) * batch_size]) for i in range(steps)]


def read_idx(path, count):
    """The first `count` items of a gzip-compressed IDX file, as uint8."""
    with gzip.open(path) as f:
        dimensions = f.read(4)[3]
        shape = [int.from_bytes(f.read(4), "big") for _ in range(dimensions)][1:]
        data = f.read(count * math.prod(shape))
    return np.frombuffer(data, np.uint8).reshape(count, *shape)


def fashion_mnist(count):
    images = os.path.join(FASHION_MNIST, "train-images-idx3-ubyte.gz")
    labels = os.path.join(FASHION_MNIST, "train-labels-idx1-ubyte.gz")
    # As traind gathers a batch: each pixel divided by 255 in float32.
    inputs = read_idx(images, count).astype(np.float32)[..., np.newaxis] / np.float32(255)
    return Examples(inputs, read_idx(labels, count).astype(np.int32), [28, 28, 1],
                    {"train": {"images": images, "labels": labels, "limit": count},
                     "shuffle": False, "prefetch_batches": 0})


def standardized(examples):
    """`examples` as TensorFlow 1's image jobs fed them after
    tf.image.per_image_standardization of their pixels cast to float (0 to
    255), and the spec that has traind do the same (data.standardize)."""
    pixels = np.round(examples.inputs * np.float32(255))
    inputs = tf.image.per_image_standardization(pixels).numpy().astype(np.float32)
    return dataclasses.replace(examples, inputs=inputs,
                               data_section={**examples.data_section, "standardize": "per_image"})


class SplitMix64:
    """core/random.h's Rng: SplitMix64's finaliser over a counter, and
    core/random.cc's Box-Muller normals."""
    MASK = 2**64 - 1

    def __init__(self, seed):
        self.state = seed

    def next(self):
        x = (self.state + 0x9e3779b97f4a7c15) & self.MASK
        self.state = (self.state + 1) & self.MASK
        x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & self.MASK
        x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & self.MASK
        return x ^ (x >> 31)

    def uniform(self):
        return (self.next() >> 11) * (1.0 / 2**53)

    def normal(self):
        u1, u2 = max(self.uniform(), 1e-300), self.uniform()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def synthetic_regression(count):
    """traind's `synthetic: {type: regression}` training set with x in
    [-1, 1], as core/dataset.cc's makeSyntheticRegression draws it from the
    spec's seed."""
    noise_stddev = float(np.float32(0.05))  # a float in the spec
    rng = SplitMix64(SEED)
    inputs, targets = [], []
    for _ in range(count):
        x = -1.0 + 2.0 * rng.uniform()
        inputs.append(x)
        targets.append(x * x + noise_stddev * rng.normal())
    return Examples(np.float32(inputs).reshape(-1, 1), np.float32(targets).reshape(-1, 1), [1],
                    {"synthetic": {"type": "regression", "points": count, "x_min": -1, "x_max": 1,
                                   "noise_stddev": 0.05},
                     "shuffle": False, "prefetch_batches": 0})


def tfrecord_examples(examples, directory, compression, png=False):
    """`examples` written by TensorFlow's TFRecordWriter as tf.train.Example
    records (images as convert_to_records.py writes them: height, width,
    depth, label, image_raw; with `png`, as tensorflow_datasets does: image
    as tf.io.encode_png's bytes, label; regression inputs and targets as
    float features), in two files, and the data section that has traind
    read them: what traind trains on is what TensorFlow wrote."""
    os.makedirs(directory, exist_ok=True)
    images = examples.input_shape == [28, 28, 1]
    options = tf.io.TFRecordOptions(compression_type=compression)
    half = len(examples.inputs) // 2
    for part, rows in enumerate([range(half), range(half, len(examples.inputs))]):
        path = os.path.join(directory, f"train-{part:05d}-of-00002.tfrecord")
        with tf.io.TFRecordWriter(path, options) as writer:
            for i in rows:
                if images and png:
                    pixels = np.rint(examples.inputs[i] * 255).astype(np.uint8)
                    features = {
                        "label": tf.train.Feature(
                            int64_list=tf.train.Int64List(value=[int(examples.targets[i])])),
                        "image": tf.train.Feature(bytes_list=tf.train.BytesList(
                            value=[tf.io.encode_png(pixels).numpy()]))}
                elif images:
                    pixels = np.rint(examples.inputs[i] * 255).astype(np.uint8)
                    features = {
                        "height": tf.train.Feature(int64_list=tf.train.Int64List(value=[28])),
                        "width": tf.train.Feature(int64_list=tf.train.Int64List(value=[28])),
                        "depth": tf.train.Feature(int64_list=tf.train.Int64List(value=[1])),
                        "label": tf.train.Feature(
                            int64_list=tf.train.Int64List(value=[int(examples.targets[i])])),
                        "image_raw": tf.train.Feature(
                            bytes_list=tf.train.BytesList(value=[pixels.tobytes()]))}
                else:
                    features = {
                        "x": tf.train.Feature(
                            float_list=tf.train.FloatList(value=examples.inputs[i])),
                        "y": tf.train.Feature(
                            float_list=tf.train.FloatList(value=examples.targets[i]))}
                writer.write(tf.train.Example(
                    features=tf.train.Features(feature=features)).SerializeToString())
    train = {"tfrecords": os.path.join(directory, "train-*-of-00002.tfrecord")}
    if png:
        train["image_feature"] = "image"
    if not images:
        train.update({"image_feature": "x", "label_feature": "y"})
    return dataclasses.replace(examples, data_section={
        "train": train, "shuffle": False, "prefetch_batches": 0})


def jpeg_examples(examples, directory, legacy=False):
    """`examples`' images as build_image_data.py writes photographs: each
    scaled to a size of its own (20-38 x 20-42) and stored as a JPEG, every
    third in colour, under image/encoded and image/class/label. The inputs
    become what TensorFlow's own pipeline makes of the files,
    tf.image.resize(tf.io.decode_jpeg(image, channels=1), [28, 28]) / 255
    (with `legacy`, TensorFlow 1's tf.compat.v1.image.resize_images):
    traind, reading them with resize: bilinear (legacy_bilinear), must
    decode and resize them as that does for the two to train alike."""
    os.makedirs(directory, exist_ok=True)
    inputs = []
    with tf.io.TFRecordWriter(os.path.join(directory, "train.tfrecord")) as writer:
        for i, image in enumerate(examples.inputs):
            size = [20 + (7 * i) % 19, 20 + (5 * i) % 23]
            pixels = tf.cast(tf.clip_by_value(tf.round(tf.image.resize(image * 255, size)), 0, 255),
                             tf.uint8)
            if i % 3 == 0:
                pixels = tf.image.grayscale_to_rgb(pixels)
            jpeg = tf.io.encode_jpeg(pixels, quality=95).numpy()
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg])),
                "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"JPEG"])),
                "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[size[0]])),
                "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[size[1]])),
                "image/class/label": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[int(examples.targets[i])]))})
            ).SerializeToString())
            decoded = tf.io.decode_jpeg(jpeg, channels=1)
            resize = tf.compat.v1.image.resize_images if legacy else tf.image.resize
            inputs.append(resize(decoded, [28, 28]).numpy() / np.float32(255))
    return dataclasses.replace(examples, inputs=np.stack(inputs).astype(np.float32), data_section={
        "train": {"tfrecords": os.path.join(directory, "train.tfrecord"),
                  "image_feature": "image/encoded", "label_feature": "image/class/label",
                  "resize": "legacy_bilinear" if legacy else "bilinear"},
        "shuffle": False, "prefetch_batches": 0})


# --- The models in TensorFlow -----------------------------------------------


def pair(value):
    """A spec's `kernel: 3` or `kernel: [3, 2]` as (height, width)."""
    return tuple(value) if isinstance(value, (list, tuple)) else (value, value)


class Network:
    """A traind layer list as TensorFlow ops. Its variables, named as
    traind's, are made as the first call meets them: Glorot-uniform kernels
    and biases within +-0.1 (not zero, so that they count from the first
    step), drawn with numpy; traind starts from them through init_from."""

    def __init__(self, layers, input_shape):
        self.layers = layers
        self.variables = {}
        self._rng = np.random.default_rng(SEED)
        self(tf.zeros([1, *input_shape]))

    def _variable(self, name, shape, limit):
        if name not in self.variables:
            initial = self._rng.uniform(-limit, limit, shape).astype(np.float32)
            self.variables[name] = tf.Variable(initial)
        return self.variables[name]

    def _affine(self, layer, x, kernel_shape, window_area):
        """A dense or conv2d layer's kernel applied to x, then its bias and activation."""
        fan_in, fan_out = kernel_shape[-2] * window_area, kernel_shape[-1] * window_area
        kernel = self._variable(layer["name"] + "/kernel", kernel_shape,
                                math.sqrt(6.0 / (fan_in + fan_out)))
        if layer["type"] == "dense":
            x = tf.matmul(x, kernel)
        else:
            x = tf.nn.conv2d(x, kernel, [1, *pair(layer.get("stride", 1)), 1],
                             layer.get("padding", "valid").upper())
        if layer.get("use_bias", True):
            x = x + self._variable(layer["name"] + "/bias", [kernel_shape[-1]], 0.1)
        return ACTIVATIONS[layer.get("activation", "linear")](x)

    def __call__(self, x):
        for layer in self.layers:
            kind = layer["type"]
            if kind == "dense":
                x = self._affine(layer, x, [x.shape[-1], layer["units"]], 1)
            elif kind == "conv2d":
                height, width = pair(layer["kernel"])
                x = self._affine(layer, x, [height, width, x.shape[-1], layer["filters"]],
                                 height * width)
            elif kind in ("max_pool", "avg_pool"):
                pool = tf.nn.max_pool2d if kind == "max_pool" else tf.nn.avg_pool2d
                x = pool(x, pair(layer["size"]), pair(layer.get("stride", layer["size"])),
                         layer.get("padding", "valid").upper())
            elif kind == "flatten":
                x = tf.reshape(x, [x.shape[0], -1])
            elif kind == "activation":
                x = ACTIVATIONS[layer["activation"]](x)
            else:
                raise ValueError(f"no TensorFlow version of layer type {kind}")
        return x


def training_loss(outputs, targets, loss):
    """A spec's loss: its name, or a mapping with label_smoothing."""
    kind = loss["type"] if isinstance(loss, dict) else loss
    if kind == "mse":
        return tf.reduce_mean(tf.square(outputs - targets))
    if isinstance(loss, dict) and loss.get("label_smoothing"):
        one_hot = tf.one_hot(targets, outputs.shape[-1])
        return tf.compat.v1.losses.softmax_cross_entropy(
            one_hot, outputs, label_smoothing=loss["label_smoothing"])
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets,
                                                                         logits=outputs))


class AdagradV2:
    """TensorFlow's ApplyAdagradV2 kernel, traind's Adagrad, with the
    interface of a tf.compat.v1 optimizer: accumulator += g * g,
    var -= rate * g / (sqrt(accumulator) + epsilon)."""

    def __init__(self, learning_rate, initial_accumulator, epsilon):
        self._learning_rate = learning_rate
        self._initial_accumulator = initial_accumulator
        self._epsilon = epsilon
        self._accumulators = {}

    def get_slot_names(self):
        return ["accumulator"]

    def get_slot(self, variable, name):
        return self._accumulators[variable.ref()]

    def apply_gradients(self, grads_and_vars, global_step):
        rate = self._learning_rate() if callable(self._learning_rate) else self._learning_rate
        for gradient, variable in grads_and_vars:
            if variable.ref() not in self._accumulators:
                self._accumulators[variable.ref()] = tf.Variable(
                    tf.fill(variable.shape, np.float32(self._initial_accumulator)))
            tf.raw_ops.ResourceApplyAdagradV2(
                var=variable.handle, accum=self._accumulators[variable.ref()].handle,
                lr=tf.cast(rate, tf.float32), epsilon=np.float32(self._epsilon), grad=gradient)
        global_step.assign_add(1)


class RmsPropFrom:
    """TensorFlow's ApplyRMSProp kernel with the mean square starting at
    `initial_rms` (Keras' RMSprop starts at 0, tf.compat.v1's at 1), with the
    interface of a tf.compat.v1 optimizer."""

    def __init__(self, learning_rate, rho, momentum, epsilon, initial_rms):
        self._learning_rate = learning_rate
        self._constants = {"rho": np.float32(rho), "momentum": np.float32(momentum),
                           "epsilon": np.float32(epsilon)}
        self._initial_rms = initial_rms
        self._slots = {}

    def get_slot_names(self):
        return ["rms", "momentum"]

    def get_slot(self, variable, name):
        return self._slots[variable.ref()][name]

    def apply_gradients(self, grads_and_vars, global_step):
        rate = self._learning_rate() if callable(self._learning_rate) else self._learning_rate
        for gradient, variable in grads_and_vars:
            if variable.ref() not in self._slots:
                self._slots[variable.ref()] = {
                    "rms": tf.Variable(tf.fill(variable.shape, np.float32(self._initial_rms))),
                    "momentum": tf.Variable(tf.zeros(variable.shape))}
            slots = self._slots[variable.ref()]
            tf.raw_ops.ResourceApplyRMSProp(
                var=variable.handle, ms=slots["rms"].handle, mom=slots["momentum"].handle,
                lr=tf.cast(rate, tf.float32), grad=gradient, **self._constants)
        global_step.assign_add(1)


def tensorflow_learning_rate(rate, global_step):
    """A spec's learning_rate: a number, or a schedule of the global step,
    with traind's defaults for what it leaves out (docs/model-spec.md)."""
    if not isinstance(rate, dict):
        return rate
    decay = rate.get("decay")
    if decay is None:
        return rate["initial"]
    if decay == "piecewise_constant":
        return v1.piecewise_constant(global_step, rate["boundaries"], rate["values"])
    if decay == "exponential":
        return v1.exponential_decay(rate["initial"], global_step, rate["decay_steps"],
                                    rate["decay_rate"], staircase=rate.get("staircase", False))
    if decay == "inverse_time":
        return v1.inverse_time_decay(rate["initial"], global_step, rate["decay_steps"],
                                     rate["decay_rate"], staircase=rate.get("staircase", False))
    if decay == "polynomial":
        return v1.polynomial_decay(rate["initial"], global_step, rate["decay_steps"],
                                   end_learning_rate=rate.get("end_learning_rate", 0.0001),
                                   power=rate.get("power", 1.0), cycle=rate.get("cycle", False))
    if decay == "cosine":
        return v1.cosine_decay(rate["initial"], global_step, rate["decay_steps"],
                               alpha=rate.get("alpha", 0.0))
    raise ValueError(f"no TensorFlow version of decay {decay}")


def tensorflow_optimizer(section, global_step):
    """The TensorFlow optimizer that applies a spec's optimizer section."""
    section = {**OPTIMIZER_DEFAULTS[section["type"]], **section}
    rate = tensorflow_learning_rate(section["learning_rate"], global_step)
    if section["type"] == "sgd":
        return v1.GradientDescentOptimizer(rate)
    if section["type"] == "momentum":
        return v1.MomentumOptimizer(rate, section["momentum"], use_nesterov=section["nesterov"])
    if section["type"] == "adagrad":
        return AdagradV2(rate, section["initial_accumulator"], section["epsilon"])
    if section["type"] == "rmsprop" and section["initial_rms"] != 1.0:
        assert not section["centered"]
        return RmsPropFrom(rate, section["rho"], section["momentum"], section["epsilon"],
                           section["initial_rms"])
    if section["type"] == "rmsprop":
        return v1.RMSPropOptimizer(rate, decay=section["rho"], momentum=section["momentum"],
                                   epsilon=section["epsilon"], centered=section["centered"])
    return v1.AdamOptimizer(rate, section["beta1"], section["beta2"], section["epsilon"])


def weight_decay_loss(network, layers, weight_decay):
    """traind's weight decay as the L2 loss of the kernels, whose gradient
    is decay * kernel: each layer's own weight_decay, else the optimizer's;
    None when no kernel decays."""
    terms = [layer.get("weight_decay", weight_decay) *
             tf.nn.l2_loss(network.variables[f"{layer['name']}/kernel"])
             for layer in layers if layer["type"] in ("dense", "conv2d")
             and layer.get("weight_decay", weight_decay)]
    return tf.add_n(terms) if terms else None


def train_in_tensorflow(case, network, batches):
    """Trains `network` as `case` says; returns its variables, optimizer
    slots and moving averages under the names traind's checkpoints give them."""
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    optimizer = tensorflow_optimizer(case.optimizer, global_step)
    variables = list(network.variables.values())
    averages = None
    if case.moving_average is not None:
        num_updates = global_step if case.moving_average.get("num_updates", True) else None
        averages = tf.train.ExponentialMovingAverage(case.moving_average["decay"],
                                                     num_updates=num_updates)
        averages.apply(variables)  # makes the averages, equal to the initial values
    clip_norm = case.optimizer.get("clip_global_norm")
    clipped_steps = 0
    for inputs, targets in batches:
        # Each worker's gradient, clipped by that worker, then their mean
        # (SyncReplicasOptimizer's): a step of one worker is the plain one.
        gradients = None
        for share_inputs, share_targets in zip(np.array_split(inputs, case.workers),
                                               np.array_split(targets, case.workers)):
            with tf.GradientTape() as tape:
                objective = training_loss(network(share_inputs), share_targets, case.loss)
                decay = weight_decay_loss(network, case.layers,
                                          case.optimizer.get("weight_decay", 0.0))
                if decay is not None:
                    objective += decay
            share_gradients = tape.gradient(objective, variables)
            if clip_norm is not None:
                share_gradients, norm = tf.clip_by_global_norm(share_gradients, clip_norm)
                clipped_steps += int(norm > clip_norm)
            gradients = share_gradients if gradients is None else [
                total + g for total, g in zip(gradients, share_gradients)]
        if case.workers > 1:
            gradients = [g / case.workers for g in gradients]
        optimizer.apply_gradients(list(zip(gradients, variables)), global_step=global_step)
        if averages is not None:
            averages.apply(variables)

    if clip_norm is not None and clipped_steps == 0:
        raise Failure(f"{case.name}: no gradient was above clip_global_norm {clip_norm}: the "
                      "check would not see the clipping; lower it")
    state = {}
    for name, variable in network.variables.items():
        state[name] = variable.numpy()
        for slot in optimizer.get_slot_names():
            state[f"{name}/{slot}"] = optimizer.get_slot(variable, slot).numpy()
        if averages is not None:
            state[f"{name}/ExponentialMovingAverage"] = averages.average(variable).numpy()
    return state


# --- traind -----------------------------------------------------------------


def flow_yaml(value):
    """`value` as YAML flow text: {type: dense, kernel: [3, 2], use_bias: false}."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {flow_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(flow_yaml(v) for v in value) + "]"
    if isinstance(value, str) and not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
        return json.dumps(value)  # a path: a double-quoted YAML string
    return str(value)


def spec_yaml(spec):
    """A model spec as YAML text: one line per section, a line per layer."""
    lines = []
    for key, value in spec.items():
        if key == "layers":
            lines += ["layers:"] + [f"  - {flow_yaml(layer)}" for layer in value]
        else:
            lines.append(f"{key}: {flow_yaml(value)}")
    return "\n".join(lines) + "\n"


def fresh_directory(path):
    """`path`, made empty: traind would resume from a checkpoint an earlier
    run of this script left there (--work-dir)."""
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def write_file(path, text):
    with open(path, "w") as f:
        f.write(text)


def write_checkpoint(directory, tensors):
    """A TensorFlow checkpoint of `tensors` under the variable scope
    INITIAL_SCOPE, written by the op tf.compat.v1.train.Saver runs (SaveV2),
    for init_from; returns its prefix."""
    os.makedirs(directory)
    prefix = os.path.join(directory, "model.ckpt-0")
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=[f"{INITIAL_SCOPE}/{n}" for n in names],
                      shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(tensors[n]) for n in names])
    return prefix


def latest_checkpoint(directory):
    """The tensors of the checkpoint `<directory>/latest` names."""
    with open(os.path.join(directory, "latest")) as f:
        return load_file(os.path.join(directory, f.read().strip(), "model.safetensors"))


def log_tail(text, lines=15):
    return "\n".join(text.rstrip().splitlines()[-lines:]) or "(no output)"


def run_standalone(traind, spec_path):
    command = [traind, "--model", spec_path]
    try:
        run = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=TRAIND_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        raise Failure(f"{' '.join(command)} ran past {TRAIND_TIMEOUT_SECONDS} s")
    if run.returncode != 0:
        raise Failure(f"{' '.join(command)} exited {run.returncode}:\n{log_tail(run.stdout)}")


def free_local_addresses(count):
    """127.0.0.1 addresses on ports the kernel found free just now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [f"127.0.0.1:{s.getsockname()[1]}" for s in sockets]
    finally:
        for s in sockets:
            s.close()


class PortTaken(Failure):
    """A task found its port taken between free_local_addresses and its bind."""


def run_sync_cluster_once(traind, spec_path, directory, workers):
    """One ps and `workers` workers on this machine in sync mode, every step
    aggregating all workers' gradients. Fails as soon as a task exits
    non-zero, or once the time is up; every process is killed on the way out."""
    ps, *worker_addresses = free_local_addresses(1 + workers)
    cluster_path = os.path.join(directory, "cluster.yaml")
    write_file(cluster_path, spec_yaml({
        "cluster": {"ps": [ps], "worker": worker_addresses},
        "training": {"mode": "sync", "replicas_to_aggregate": workers,
                     "total_num_replicas": workers}}))
    tasks = [("ps", 0)] + [("worker", i) for i in range(workers)]
    logs = {task: os.path.join(directory, f"{task[0]}{task[1]}.log") for task in tasks}
    processes = {}
    try:
        for job, task in tasks:
            with open(logs[job, task], "w") as log:
                processes[job, task] = subprocess.Popen(
                    [traind, "--cluster", cluster_path, "--model", spec_path, "--job", job,
                     "--task", str(task)], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + TRAIND_TIMEOUT_SECONDS
        while any(process.poll() is None for process in processes.values()):
            for (job, task), process in processes.items():
                if process.poll():  # exited, not 0
                    with open(logs[job, task]) as log:
                        output = log.read()
                    failure = PortTaken if "Address already in use" in output else Failure
                    raise failure(f"{job} {task} exited {process.returncode}:\n{log_tail(output)}")
            if time.monotonic() > deadline:
                raise Failure(f"the cluster ran past {TRAIND_TIMEOUT_SECONDS} s")
            time.sleep(0.1)
        for (job, task), process in processes.items():
            if process.returncode:
                with open(logs[job, task]) as log:
                    raise Failure(f"{job} {task} exited {process.returncode}:\n"
                                  f"{log_tail(log.read())}")
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()


def run_sync_cluster(traind, spec_path, directory, workers):
    """run_sync_cluster_once, again on other ports if another program took
    one of them first (tests run in parallel)."""
    try:
        run_sync_cluster_once(traind, spec_path, directory, workers)
    except PortTaken:
        shutil.rmtree(os.path.join(directory, "checkpoints"), ignore_errors=True)
        run_sync_cluster_once(traind, spec_path, directory, workers)


def train_with_traind(check, traind, directory, spec, workers=1):
    """Writes the model spec `spec` (its name, seed and checkpoint directory
    added) into `directory` and trains it, standalone or on a sync cluster
    of `workers`; returns the tensors of its final checkpoint."""
    spec = {"name": "tensorflow_reference", "seed": SEED, **spec,
            "checkpoint": {"dir": os.path.join(directory, "checkpoints")}}
    spec_path = os.path.join(directory, "model.yaml")
    write_file(spec_path, spec_yaml(spec))
    try:
        if workers == 1:
            run_standalone(traind, spec_path)
        else:
            run_sync_cluster(traind, spec_path, directory, workers)
    except Failure as e:
        raise Failure(f"{check}: traind failed: {e}")
    return latest_checkpoint(spec["checkpoint"]["dir"])


# --- Checks -----------------------------------------------------------------


@dataclasses.dataclass
class Case:
    """A model trained by traind and by TensorFlow, to be compared."""
    name: str
    layers: list
    optimizer: dict
    examples: Examples
    loss: str | dict = "softmax_cross_entropy"  # a spec's loss field
    moving_average: dict | None = None
    workers: int = 1  # more: a sync cluster of one ps and that many workers
    # Where a step runs inside traind: training's devices and micro_batches,
    # and the spec's stages. A step is still one update of the whole batch.
    placement: dict = dataclasses.field(default_factory=dict)


def compare(check, traind, reference, tolerance=TOLERANCE):
    """The Row of the tensor of `reference` that differs most in traind's
    tensors, relative to its largest value; Failure if one differs by more
    than `tolerance`."""
    rows = []
    for name, expected in reference.items():
        if name not in traind:
            raise Failure(f"{check}: traind's checkpoint has no tensor {name}")
        if np.shape(traind[name]) != np.shape(expected):
            raise Failure(f"{check}: {name}: traind's shape {np.shape(traind[name])}, "
                          f"TensorFlow's {np.shape(expected)}")
        actual, expected = np.asarray(traind[name], np.float64), np.asarray(expected, np.float64)
        abs_diff = float(np.max(np.abs(actual - expected)))
        rel_diff = abs_diff / max(float(np.max(np.abs(expected))), np.finfo(np.float32).tiny)
        rows.append(Row(check, name, abs_diff, rel_diff, tolerance))
    worst = max(rows, key=lambda row: row.rel_diff)
    if worst.rel_diff > tolerance:
        raise Failure(f"{check}: tensor {worst.tensor}: max |traind - TensorFlow| "
                      f"{worst.abs_diff:.3e}, relative to its largest value {worst.rel_diff:.3e}, "
                      f"tolerance {tolerance:g}")
    return worst


def check_case(case, traind, work_dir, steps):
    """Trains `case` with traind and with TensorFlow; compares what they end with."""
    directory = fresh_directory(os.path.join(work_dir, case.name.replace(" ", "_")))
    network = Network(case.layers, case.examples.input_shape)
    initial = write_checkpoint(os.path.join(directory, "initial"),
                               {name: v.numpy() for name, v in network.variables.items()})
    spec = {
        "input": case.examples.input_shape, "layers": case.layers, "loss": case.loss,
        "optimizer": case.optimizer,
        "data": {**case.examples.data_section, "batch_size": BATCH_SIZE},
        "training": {"max_steps": steps, "log_every": steps, "threads": 1,
                     **{k: v for k, v in case.placement.items() if k != "stages"}},
        "init_from": {"checkpoint": initial, "scope": INITIAL_SCOPE, "layers": [
            layer["name"] for layer in case.layers if layer["type"] in ("dense", "conv2d")]},
    }
    if case.moving_average is not None:
        spec["moving_average"] = case.moving_average
    if "stages" in case.placement:
        spec["stages"] = case.placement["stages"]
    trained = train_with_traind(case.name, traind, directory, spec, case.workers)
    # A sync step applies the mean gradient of the workers' batches, taken
    # in turn from the data: one TensorFlow step over all of them.
    batches = case.examples.batches(steps, BATCH_SIZE * case.workers)
    return compare(case.name, trained, train_in_tensorflow(case, network, batches))


PERCEPTRON = [{"type": "flatten"},
              {"type": "dense", "name": "hidden", "units": 32, "activation": "relu"},
              {"type": "dense", "name": "logits", "units": 10}]

# Same padding with stride 1 and 2 (an even input: padding at the bottom and
# right only), a same max pool, a valid stride-2 convolution that leaves a
# row and column out, a same average pool over padded windows, a dense layer
# without bias and an activation layer.
CNN_A = [{"type": "conv2d", "name": "conv1", "filters": 4, "kernel": 3, "padding": "same",
          "activation": "relu"},
         {"type": "conv2d", "name": "conv2", "filters": 6, "kernel": 3, "stride": 2,
          "padding": "same", "activation": "tanh"},
         {"type": "max_pool", "name": "pool1", "size": 3, "stride": 2, "padding": "same"},
         {"type": "conv2d", "name": "conv3", "filters": 5, "kernel": 2, "stride": 2,
          "activation": "sigmoid"},
         {"type": "avg_pool", "name": "pool2", "size": 2, "padding": "same"},
         {"type": "flatten"},
         {"type": "dense", "name": "hidden", "units": 12, "use_bias": False},
         {"type": "activation", "activation": "tanh"},
         {"type": "dense", "name": "logits", "units": 10}]

# An even kernel with same padding and stride 3 (padding split 1 before, 2
# after), a non-square kernel and stride, a linear convolution, a valid max
# pool that leaves a column out, an overlapping valid average pool, a sigmoid
# dense layer.
CNN_B = [{"type": "conv2d", "name": "conv1", "filters": 4, "kernel": 4, "stride": 3,
          "padding": "same", "activation": "relu"},
         {"type": "conv2d", "name": "conv2", "filters": 4, "kernel": [3, 2], "stride": [1, 2],
          "padding": "same", "activation": "linear"},
         {"type": "max_pool", "name": "pool1", "size": 2},
         {"type": "avg_pool", "name": "pool2", "size": 2, "stride": 1},
         {"type": "flatten"},
         {"type": "dense", "name": "hidden", "units": 16, "activation": "sigmoid"},
         {"type": "dense", "name": "logits", "units": 10}]

REGRESSION = [{"type": "dense", "name": "hidden", "units": 10, "activation": "tanh"},
              {"type": "dense", "name": "output", "units": 1}]

# Fast enough to change the rate at every few of the checks' steps.
DECAYING_RATE = {"initial": 0.1, "decay": "exponential", "decay_steps": 3, "decay_rate": 0.6}
# Every schedule, each changing the rate several times within the checks'
# 30 steps.
SCHEDULES = {
    "exponential staircase": {"initial": 0.2, "decay": "exponential", "decay_steps": 4,
                              "decay_rate": 0.7, "staircase": True},
    "inverse_time staircase": {"initial": 0.2, "decay": "inverse_time", "decay_steps": 4,
                               "decay_rate": 0.5, "staircase": True},
    "piecewise_constant": {"decay": "piecewise_constant", "boundaries": [5, 12, 20],
                           "values": [0.2, 0.1, 0.05, 0.02]},
    "polynomial cycle": {"initial": 0.2, "decay": "polynomial", "decay_steps": 8,
                         "end_learning_rate": 0.01, "power": 2, "cycle": True},
    "cosine": {"initial": 0.2, "decay": "cosine", "decay_steps": 20, "alpha": 0.1},
}


def training_cases(steps, work_dir):
    """Every check that trains a model, for `steps` steps."""
    fashion = fashion_mnist(steps * BATCH_SIZE)
    regression = synthetic_regression(steps * BATCH_SIZE)
    data_dir = os.path.join(work_dir, "tfrecords")
    return [
        Case("sgd", PERCEPTRON, {"type": "sgd", "learning_rate": 0.1}, fashion),
        Case("sgd weight_decay", PERCEPTRON,
             {"type": "sgd", "learning_rate": 0.1, "weight_decay": 0.01}, fashion),
        Case("momentum exponential decay", PERCEPTRON,
             {"type": "momentum", "learning_rate": DECAYING_RATE, "momentum": 0.9,
              "nesterov": False}, fashion),
        Case("nesterov exponential decay", PERCEPTRON,
             {"type": "momentum", "learning_rate": DECAYING_RATE, "momentum": 0.9,
              "nesterov": True}, fashion),
        # An epsilon large enough that where it goes in the formula shows.
        Case("adagrad accumulator 0.01 epsilon 0.1", PERCEPTRON,
             {"type": "adagrad", "learning_rate": 0.1, "initial_accumulator": 0.01,
              "epsilon": 0.1}, fashion),
        Case("adam defaults", PERCEPTRON, {"type": "adam", "learning_rate": 0.001}, fashion),
        Case("adam 0.5 0.9 epsilon 0.01 weight_decay", PERCEPTRON,
             {"type": "adam", "learning_rate": 0.01, "beta1": 0.5, "beta2": 0.9, "epsilon": 0.01,
              "weight_decay": 0.05}, fashion),
        Case("rmsprop defaults", PERCEPTRON, {"type": "rmsprop", "learning_rate": 0.001},
             fashion),
        # Momentum's slot holds rate-scaled steps: a decaying rate shows
        # whether the rate is taken at its own step.
        Case("rmsprop momentum decay weight_decay", PERCEPTRON,
             {"type": "rmsprop", "learning_rate": {**DECAYING_RATE, "initial": 0.01},
              "rho": 0.8, "momentum": 0.9, "epsilon": 1e-3, "weight_decay": 0.01}, fashion),
        Case("rmsprop centered", PERCEPTRON,
             {"type": "rmsprop", "learning_rate": 0.001, "centered": True, "epsilon": 1e-3},
             fashion),
        Case("rmsprop as keras", PERCEPTRON,
             {"type": "rmsprop", "learning_rate": 0.001, "initial_rms": 0.0, "epsilon": 1e-7},
             fashion),
        # A norm most steps' gradients exceed; with weight decay, whose
        # penalty TensorFlow clips with the rest of the gradient.
        Case("sgd clip_global_norm", PERCEPTRON,
             {"type": "sgd", "learning_rate": 0.1, "clip_global_norm": 0.5}, fashion),
        Case("adam clip_global_norm weight_decay", PERCEPTRON,
             {"type": "adam", "learning_rate": 0.01, "epsilon": 1e-3, "clip_global_norm": 0.5,
              "weight_decay": 0.05}, fashion),
        Case("label_smoothing 0.2", PERCEPTRON, {"type": "sgd", "learning_rate": 0.1}, fashion,
             loss={"type": "softmax_cross_entropy", "label_smoothing": 0.2}),
        # A layer's own decay beside the optimizer's, both in the clipped norm.
        Case("layer weight_decay clip_global_norm", [
            {"type": "flatten"},
            {"type": "dense", "name": "hidden", "units": 32, "activation": "relu",
             "weight_decay": 0.2},
            {"type": "dense", "name": "logits", "units": 10}],
             {"type": "momentum", "learning_rate": 0.1, "momentum": 0.9, "weight_decay": 0.01,
              "clip_global_norm": 0.5}, fashion),
        Case("layers cnn_a", CNN_A, {"type": "sgd", "learning_rate": 0.1}, fashion),
        Case("layers cnn_b", CNN_B, {"type": "sgd", "learning_rate": 0.1}, fashion),
        Case("standardize per_image cnn_a", CNN_A, {"type": "sgd", "learning_rate": 0.01},
             standardized(fashion)),
        Case("mse regression", REGRESSION, {"type": "sgd", "learning_rate": 0.1},
             regression, loss="mse"),
        # The same examples, as TensorFlow writes them to TFRecord files.
        Case("tfrecords gzip", PERCEPTRON, {"type": "sgd", "learning_rate": 0.1},
             tfrecord_examples(fashion, os.path.join(data_dir, "gzip"), "GZIP")),
        Case("tfrecords zlib cnn_a", CNN_A, {"type": "sgd", "learning_rate": 0.1},
             tfrecord_examples(fashion, os.path.join(data_dir, "zlib"), "ZLIB")),
        Case("tfrecords png", PERCEPTRON, {"type": "sgd", "learning_rate": 0.1},
             tfrecord_examples(fashion, os.path.join(data_dir, "png"), "GZIP", png=True)),
        Case("tfrecords jpeg resized", PERCEPTRON, {"type": "sgd", "learning_rate": 0.1},
             jpeg_examples(fashion, os.path.join(data_dir, "jpeg"))),
        Case("tfrecords jpeg legacy resize cnn_a", CNN_A, {"type": "sgd", "learning_rate": 0.1},
             jpeg_examples(fashion, os.path.join(data_dir, "jpeg-legacy"), legacy=True)),
        Case("tfrecords floats mse", REGRESSION, {"type": "sgd", "learning_rate": 0.1},
             tfrecord_examples(regression, os.path.join(data_dir, "raw"), ""), loss="mse"),
        *[Case(f"schedule {name}", PERCEPTRON, {"type": "sgd", "learning_rate": schedule},
               fashion) for name, schedule in SCHEDULES.items()],
        # (1 + t) / (10 + t) is below 0.9 up to t = 80: over the checks'
        # steps, num_updates sets the decay.
        Case("moving average num_updates", PERCEPTRON, {"type": "sgd", "learning_rate": 0.1},
             fashion, moving_average={"decay": 0.9}),
        Case("moving average fixed decay", PERCEPTRON, {"type": "sgd", "learning_rate": 0.1},
             fashion, moving_average={"decay": 0.9, "num_updates": False}),
        # Adam's epsilon raised here and for the cluster: at 1e-7 its
        # division by sqrt(v) of gradients near 0 makes the towers' other
        # order of summation 3e-5 of a tensor (SGD: 2e-7).
        Case("towers on 2 cpus adam", PERCEPTRON,
             {"type": "adam", "learning_rate": 0.01, "epsilon": 1e-3}, fashion,
             placement={"devices": ["cpu:0", "cpu:1"]}),
        Case("pipeline 2 stages 4 micro-batches adam", PERCEPTRON,
             {"type": "adam", "learning_rate": 0.01, "epsilon": 1e-3}, fashion,
             placement={"devices": ["cpu:0", "cpu:1"], "micro_batches": 4,
                        "stages": [{"name": "first", "device": "cpu:0",
                                    "layers": ["flatten_1", "hidden"]},
                                   {"name": "last", "device": "cpu:1", "layers": ["logits"]}]}),
        # The loss on a pipeline's last stage, its micro-batches' sum.
        Case("pipeline label_smoothing", PERCEPTRON, {"type": "sgd", "learning_rate": 0.1},
             fashion, loss={"type": "softmax_cross_entropy", "label_smoothing": 0.2},
             placement={"devices": ["cpu:0", "cpu:1"], "micro_batches": 4,
                        "stages": [{"name": "first", "device": "cpu:0",
                                    "layers": ["flatten_1", "hidden"]},
                                   {"name": "last", "device": "cpu:1", "layers": ["logits"]}]}),
        Case("sync cluster 1 ps 2 workers adam", PERCEPTRON,
             {"type": "adam", "learning_rate": 0.01, "epsilon": 1e-3},
             fashion_mnist(steps * BATCH_SIZE * 2), workers=2),
        # The ps's update with three slots.
        Case("sync cluster centered rmsprop", PERCEPTRON,
             {"type": "rmsprop", "learning_rate": 0.001, "momentum": 0.5, "centered": True,
              "epsilon": 1e-3}, fashion_mnist(steps * BATCH_SIZE * 2), workers=2),
        # Each worker clips its own gradient before the ps averages them.
        Case("sync cluster clip_global_norm weight_decay", PERCEPTRON,
             {"type": "sgd", "learning_rate": 0.1, "clip_global_norm": 0.5,
              "weight_decay": 0.05}, fashion_mnist(steps * BATCH_SIZE * 2), workers=2),
        Case("towers on 2 cpus clip_global_norm", PERCEPTRON,
             {"type": "sgd", "learning_rate": 0.1, "clip_global_norm": 0.5}, fashion,
             placement={"devices": ["cpu:0", "cpu:1"]}),
    ]


# Each initializer checked: its spec value, and Keras' initializer of the
# same law (given a seed).
INITIALIZERS = {
    "glorot_uniform": ("glorot_uniform", tf.keras.initializers.GlorotUniform),
    "glorot_normal": ("glorot_normal", tf.keras.initializers.GlorotNormal),
    "he_uniform": ("he_uniform", tf.keras.initializers.HeUniform),
    "he_normal": ("he_normal", tf.keras.initializers.HeNormal),
    "truncated_normal": ({"truncated_normal": 0.05},
                         lambda seed: tf.keras.initializers.TruncatedNormal(stddev=0.05, seed=seed)),
    "random_normal": ({"random_normal": 0.05},
                      lambda seed: tf.keras.initializers.RandomNormal(stddev=0.05, seed=seed)),
}

# What the initializer checks compare, each with its tolerance: a statistic
# of traind's draws may differ from that of Keras' draws by this fraction of
# Keras'. Every kernel holds 74k to 2.4M values: the standard deviations of
# two draws of one law differ by 0.2% (one standard error), their largest
# values by 0.01% where the law is bounded (both lie that close to the
# bound), the share beyond two deviations (4.6% for a normal) by 2%, its
# standard error at 74k values. An untruncated normal's largest value is
# twice the truncated one's, and its share 30% more; a truncated normal left
# narrow (not widened by 1 / 0.8796) has a deviation 12% short. An
# untruncated normal's largest value is chance: not compared.
DRAW_STATISTICS = {
    "std": (lambda values: np.std(values, dtype=np.float64), 0.02),
    "max |x|": (lambda values: np.max(np.abs(values)), 0.01),
    "beyond 2 std": (lambda values: np.mean(np.abs(values) > 2 * np.std(values)), 0.1),
}
UNBOUNDED = {"random_normal"}  # whose "max |x|" is left out


def initializer_layers():
    """A convolution and a dense layer per initializer, frozen so that a
    step leaves their kernels as drawn; a first convolution widens the input
    to 64 channels, so that each kernel holds 74k values or more."""
    convolutions = [{"type": "conv2d", "name": "widen", "filters": 64, "kernel": 2, "stride": 2,
                     "trainable": False}]
    denses = []
    for name, (initializer, _) in INITIALIZERS.items():
        convolutions.append({"type": "conv2d", "name": f"conv_{name}", "filters": 128,
                             "kernel": 3, "kernel_initializer": initializer, "trainable": False})
        denses.append({"type": "dense", "name": f"dense_{name}", "units": 512,
                       "kernel_initializer": initializer, "trainable": False})
    return convolutions + [{"type": "flatten"}] + denses + [
        {"type": "dense", "name": "logits", "units": 10}]


def traind_initial_kernels(traind, work_dir, layers):
    """The kernels traind draws for `layers`: a step's checkpoint, the
    layers frozen."""
    spec = {"input": [28, 28, 1], "layers": layers,
            "optimizer": {"type": "sgd", "learning_rate": 0.1},
            "data": {**fashion_mnist(1).data_section, "batch_size": 1},
            "training": {"max_steps": 1, "threads": 1}}
    return train_with_traind("initializers", traind,
                             fresh_directory(os.path.join(work_dir, "initializers")), spec)


def check_initializers(traind, work_dir):
    """traind's initial kernels against Keras' initializers' draws of the
    same shapes, by the statistics of DRAW_STATISTICS."""
    layers = initializer_layers()
    drawn = traind_initial_kernels(traind, work_dir, layers)
    rows = []
    for name, (_, keras_initializer) in INITIALIZERS.items():
        traind_kernels = {f"{kind}_{name}/kernel": drawn[f"{kind}_{name}/kernel"]
                          for kind in ("conv", "dense")}
        keras_kernels = {tensor: keras_initializer(seed=SEED)(kernel.shape).numpy()
                         for tensor, kernel in traind_kernels.items()}
        for statistic, (measure, tolerance) in DRAW_STATISTICS.items():
            if statistic == "max |x|" and name in UNBOUNDED:
                continue
            rows.append(compare(f"{name} {statistic}",
                                {name: measure(k) for name, k in traind_kernels.items()},
                                {name: measure(k) for name, k in keras_kernels.items()},
                                tolerance))
    return rows


# --- Main -------------------------------------------------------------------


def print_row(row):
    print(f"{row.check:42} {row.tensor:40} {row.abs_diff:9.2e} {row.rel_diff:9.2e} "
          f"{row.tolerance:9.0e}", flush=True)


class GraphNetwork(Network):
    """Network as a TensorFlow 1 graph builds it: its variables made by
    tf.compat.v1.get_variable under the variable scope `scope`, so that they,
    their optimizer's slots and their moving averages take TensorFlow 1's
    names in a Saver's checkpoint (net/hidden/kernel, net/hidden/kernel/Adam);
    with `partitions` above 1, each dense kernel partitioned in that many by
    rows, as a TensorFlow 1 ps job's fixed_size_partitioner(num_ps) leaves
    it (its slots and averages too). Build it inside a graph."""

    def __init__(self, layers, input_shape, scope, partitions=1):
        self._scope = scope
        self._partitions = partitions
        super().__init__(layers, input_shape)

    def _variable(self, name, shape, limit):
        if name not in self.variables:
            initial = self._rng.uniform(-limit, limit, shape).astype(np.float32)
            partitioned = self._partitions > 1 and name.endswith("/kernel")

            def initializer(part_shape, dtype=None, partition_info=None):
                if partition_info is None:
                    return initial
                offset = partition_info.var_offset
                return initial[tuple(slice(o, o + n) for o, n in zip(offset, part_shape))]
            with tf.compat.v1.variable_scope(self._scope):
                self.variables[name] = tf.compat.v1.get_variable(
                    name, shape=shape, initializer=initializer,
                    partitioner=(tf.compat.v1.fixed_size_partitioner(self._partitions)
                                 if partitioned else None))
        return self.variables[name]


def variable_parts(variable):
    """A variable's partitions, or the variable itself."""
    # A PartitionedVariable is no tf.Variable; it iterates over its parts.
    return [variable] if isinstance(variable, tf.Variable) else list(variable)


def import_cases():
    """A TensorFlow 1 job of each optimizer that keeps state, taken over by
    traind mid-run, and how many partitions its kernels are in; its learning
    rates and moving averages depend on the global step, which the import
    must carry over."""
    return [
        (Case("import adam moving average partitioned", PERCEPTRON,
              {"type": "adam", "learning_rate": 0.01}, None, moving_average={"decay": 0.99}), 2),
        (Case("import rmsprop centered momentum", PERCEPTRON,
              {"type": "rmsprop", "learning_rate": 0.001, "centered": True, "momentum": 0.5,
               "epsilon": 1e-3}, None), 1),
        (Case("import rmsprop partitioned", PERCEPTRON,
              {"type": "rmsprop", "learning_rate": 0.001, "epsilon": 1e-3}, None), 3),
        (Case("import nesterov exponential decay", PERCEPTRON,
              {"type": "momentum", "learning_rate": DECAYING_RATE, "momentum": 0.9,
               "nesterov": True}, None), 1),
        # tf.compat.v1's Adagrad has no epsilon: traind's at 1e-10 is as none.
        (Case("import adagrad", PERCEPTRON,
              {"type": "adagrad", "learning_rate": 0.1, "initial_accumulator": 0.1,
               "epsilon": 1e-10}, None), 1),
    ]


class TensorflowJob:
    """A TensorFlow 1 job of `case` as a graph: GraphNetwork under the scope
    `net` (kernels in `partitions`), its tf.compat.v1 optimizer minimising
    the loss with the global step, a moving average applied after each
    update, and a Saver of all of it."""
    SCOPE = "net"

    def __init__(self, case, partitions, input_shape):
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.inputs = tf.compat.v1.placeholder(tf.float32, [BATCH_SIZE, *input_shape])
            self.targets = tf.compat.v1.placeholder(tf.int32, [BATCH_SIZE])
            self.network = GraphNetwork(case.layers, input_shape, self.SCOPE, partitions)
            self.global_step = tf.compat.v1.train.get_or_create_global_step()
            if case.optimizer["type"] == "adagrad":
                self.optimizer = v1.AdagradOptimizer(
                    case.optimizer["learning_rate"],
                    initial_accumulator_value=case.optimizer["initial_accumulator"])
            else:
                self.optimizer = tensorflow_optimizer(case.optimizer, self.global_step)
            loss = training_loss(self.network(self.inputs), self.targets, case.loss)
            self.train = self.optimizer.minimize(loss, global_step=self.global_step)
            parts = [part for variable in self.network.variables.values()
                     for part in variable_parts(variable)]
            self.averages = None
            if case.moving_average is not None:
                self.averages = tf.train.ExponentialMovingAverage(
                    case.moving_average["decay"], num_updates=self.global_step)
                with tf.control_dependencies([self.train]):
                    self.train = self.averages.apply(parts)
            self.saver = tf.compat.v1.train.Saver(save_relative_paths=True)
            self.initialize = tf.compat.v1.global_variables_initializer()

    def session(self):
        return tf.compat.v1.Session(graph=self.graph)

    def step(self, session, batch):
        session.run(self.train, {self.inputs: batch[0], self.targets: batch[1]})

    def state(self, session):
        """Its variables, slots and averages, whole, under traind's names."""
        def whole(variable, of_part):
            return np.concatenate([session.run(of_part(part))
                                   for part in variable_parts(variable)], axis=0)
        state = {}
        for name, variable in self.network.variables.items():
            state[name] = whole(variable, lambda part: part)
            for slot in self.optimizer.get_slot_names():
                state[f"{name}/{slot}"] = whole(
                    variable, lambda part: self.optimizer.get_slot(part, slot))
            if self.averages is not None:
                state[f"{name}/ExponentialMovingAverage"] = whole(variable, self.averages.average)
        return state


def job_spec(case, examples, directory, max_steps):
    spec = {"name": "tensorflow_reference", "seed": SEED, "input": examples.input_shape,
            "layers": case.layers, "loss": case.loss, "optimizer": case.optimizer,
            "data": {**examples.data_section, "batch_size": BATCH_SIZE},
            "training": {"max_steps": max_steps, "log_every": max_steps, "threads": 1},
            "checkpoint": {"dir": os.path.join(directory, "checkpoints")}}
    if case.moving_average is not None:
        spec["moving_average"] = case.moving_average
    return spec


def run_trainctl(traind, arguments):
    command = [os.path.join(os.path.dirname(traind), "trainctl"), *arguments]
    return command, subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, timeout=TRAIND_TIMEOUT_SECONDS)


def check_import(case, partitions, traind, work_dir, steps):
    """A TensorFlow 1 graph trains `case` for `steps` steps and saves a
    checkpoint with its Saver; `trainctl import` takes it over and traind
    trains `steps` more; TensorFlow trains the same `steps` more from where
    it saved. traind's final checkpoint must hold what TensorFlow ends with."""
    directory = fresh_directory(os.path.join(work_dir, case.name.replace(" ", "_")))
    examples = fashion_mnist(2 * steps * BATCH_SIZE)
    batches = examples.batches(2 * steps, BATCH_SIZE)
    tensorflow_dir = os.path.join(directory, "tensorflow")
    job = TensorflowJob(case, partitions, examples.input_shape)
    with job.session() as session:
        session.run(job.initialize)
        for step, batch in enumerate(batches):
            if step == steps:
                job.saver.save(session, os.path.join(tensorflow_dir, "model.ckpt"),
                               global_step=job.global_step, write_meta_graph=False)
            job.step(session, batch)
        expected = job.state(session)

    spec = job_spec(case, examples, directory, 2 * steps)
    spec_path = os.path.join(directory, "model.yaml")

    def trainctl_import(spec):
        write_file(spec_path, spec_yaml(spec))
        return run_trainctl(traind, ["import", "--model", spec_path, "--scope", job.SCOPE,
                                     tensorflow_dir])

    if case.optimizer["type"] == "rmsprop" and case.optimizer.get("centered"):
        # A control: the job's centered state is refused by a spec without it.
        command, run = trainctl_import(
            {**spec, "optimizer": {**case.optimizer, "centered": False}})
        if run.returncode != 2 or "the job's RMSProp was centered" not in run.stdout:
            raise Failure(f"{case.name}: {' '.join(command)} took a centered job into a spec that "
                          f"is not (exit {run.returncode}):\n{log_tail(run.stdout)}")
    return compare(case.name, trained_on_from(case.name, traind, trainctl_import(spec), spec,
                                              spec_path), expected)


def trained_on_from(check, traind, imported_by, spec, spec_path):
    """What traind's final checkpoint holds once it has trained on from the
    checkpoint `trainctl import` wrote (`imported_by`: its command and run)."""
    command, run = imported_by
    if run.returncode != 0:
        raise Failure(f"{check}: {' '.join(command)} exited {run.returncode}:\n"
                      f"{log_tail(run.stdout)}")
    imported = latest_checkpoint(spec["checkpoint"]["dir"])
    try:
        run_standalone(traind, spec_path)
    except Failure as e:
        raise Failure(f"{check}: traind failed: {e}")
    trained = latest_checkpoint(spec["checkpoint"]["dir"])
    if all(np.array_equal(imported[name], trained[name]) for name in imported):
        raise Failure(f"{check}: traind's checkpoint is the import's: it trained nothing")
    return trained


def check_export(case, partitions, traind, work_dir, steps):
    """The other way: traind trains `case` for `steps` steps, `trainctl
    export` writes its checkpoint as a TensorFlow 1 job's, and the job's
    graph restores it with its Saver and trains `steps` more; traind trains
    the same `steps` more from its own checkpoint. TensorFlow must end with
    what traind's final checkpoint holds."""
    name = case.name.replace("import", "export")
    directory = fresh_directory(os.path.join(work_dir, name.replace(" ", "_")))
    examples = fashion_mnist(2 * steps * BATCH_SIZE)
    batches = examples.batches(2 * steps, BATCH_SIZE)
    spec_path = os.path.join(directory, "model.yaml")
    spec = job_spec(case, examples, directory, steps)
    try:
        write_file(spec_path, spec_yaml(spec))
        run_standalone(traind, spec_path)
        prefix = os.path.join(directory, "tensorflow", f"model.ckpt-{steps}")
        command, run = run_trainctl(traind, ["export", "--model", spec_path, "--checkpoint",
                                             spec["checkpoint"]["dir"], "--scope",
                                             TensorflowJob.SCOPE, prefix])
        if run.returncode != 0:
            raise Failure(f"{' '.join(command)} exited {run.returncode}:\n{log_tail(run.stdout)}")
        spec["training"]["max_steps"] = 2 * steps
        write_file(spec_path, spec_yaml(spec))
        run_standalone(traind, spec_path)
    except Failure as e:
        raise Failure(f"{name}: {e}")
    trained = latest_checkpoint(spec["checkpoint"]["dir"])

    job = TensorflowJob(case, partitions, examples.input_shape)
    with job.session() as session:
        job.saver.restore(session, tf.train.latest_checkpoint(os.path.dirname(prefix)))
        if session.run(job.global_step) != steps:
            raise Failure(f"{name}: TensorFlow restored global step "
                          f"{session.run(job.global_step)}, not {steps}")
        for batch in batches[steps:]:
            job.step(session, batch)
        return compare(name, trained, job.state(session))


def keras_import_cases():
    """Each: the check's name, the Keras module, its optimizer, traind's
    optimizer section for the same rule, the model's path to its dense
    layers, and each traind slot's value from the optimizer and the index of
    a variable in model.trainable_variables. Keras' betas, rho, momentum and
    epsilon are given as the spec's."""
    import keras
    import tf_keras

    # Keras 3's and Keras 2.11's lists, in the order of the variables.
    def keras3(*lists, factor=1.0):
        return lambda optimizer, variable, index: [factor * getattr(optimizer, name)[index].numpy()
                                                   for name in lists]

    def keras2(*slots, factor=1.0):
        return lambda optimizer, variable, index: [factor * optimizer.get_slot(variable, name)
                                                   .numpy() for name in slots]

    keras3_layers = ["model/_functional/_operations/2", "model/_functional/_operations/3"]
    keras2_layers = ["model/layer_with_weights-0", "model/layer_with_weights-1"]
    legacy = tf_keras.optimizers.legacy
    return [
        ("import keras 3 adam", keras, lambda: keras.optimizers.Adam(0.01),
         {"type": "adam", "learning_rate": 0.01}, keras3_layers,
         ("m", "v"), keras3("_momentums", "_velocities")),
        # Loss scaling: the state is the wrapped Adam's (inner_optimizer).
        ("import keras 3 adam loss scaled", keras,
         lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.01)),
         {"type": "adam", "learning_rate": 0.01}, keras3_layers, ("m", "v"),
         lambda optimizer, variable, index: keras3("_momentums", "_velocities")(
             optimizer.inner_optimizer, variable, index)),
        ("import keras 3 rmsprop centered", keras,
         lambda: keras.optimizers.RMSprop(0.005, momentum=0.5, centered=True),
         {"type": "rmsprop", "learning_rate": 0.005, "momentum": 0.5, "centered": True,
          "epsilon": 1e-7}, keras3_layers,
         ("rms", "momentum", "mg"), keras3("_velocities", "_momentums", "_average_gradients")),
        ("import keras 3 adagrad", keras, lambda: keras.optimizers.Adagrad(0.05),
         {"type": "adagrad", "learning_rate": 0.05}, keras3_layers,
         ("accumulator",), keras3("_accumulators")),
        ("import keras 3 sgd nesterov", keras,
         lambda: keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
         {"type": "momentum", "learning_rate": 0.05, "momentum": 0.9, "nesterov": True},
         keras3_layers, ("momentum",), keras3("momentums", factor=-1 / 0.05)),
        ("import keras 2.11 adam", tf_keras, lambda: tf_keras.optimizers.Adam(0.01),
         {"type": "adam", "learning_rate": 0.01}, keras2_layers,
         ("m", "v"), keras3("_momentums", "_velocities")),
        ("import keras 2.11 rmsprop", tf_keras,
         lambda: tf_keras.optimizers.RMSprop(0.005, momentum=0.5),
         {"type": "rmsprop", "learning_rate": 0.005, "momentum": 0.5, "epsilon": 1e-7},
         keras2_layers, ("rms", "momentum"), keras3("_velocities", "_momentums")),
        ("import keras 2.11 sgd momentum", tf_keras,
         lambda: tf_keras.optimizers.SGD(0.05, momentum=0.9),
         {"type": "momentum", "learning_rate": 0.05, "momentum": 0.9}, keras2_layers,
         ("momentum",), keras3("momentums", factor=-1 / 0.05)),
        ("import keras 2 adam", tf_keras, lambda: legacy.Adam(0.01),
         {"type": "adam", "learning_rate": 0.01}, keras2_layers, ("m", "v"), keras2("m", "v")),
        ("import keras 2 rmsprop", tf_keras, lambda: legacy.RMSprop(0.005, momentum=0.5),
         {"type": "rmsprop", "learning_rate": 0.005, "momentum": 0.5, "epsilon": 1e-7},
         keras2_layers, ("rms", "momentum"), keras2("rms", "momentum")),
        ("import keras 2 adagrad", tf_keras, lambda: legacy.Adagrad(0.05),
         {"type": "adagrad", "learning_rate": 0.05}, keras2_layers,
         ("accumulator",), keras2("accumulator")),
        ("import keras 2 sgd momentum", tf_keras, lambda: legacy.SGD(0.05, momentum=0.9),
         {"type": "momentum", "learning_rate": 0.05, "momentum": 0.9}, keras2_layers,
         ("momentum",), keras2("momentum", factor=-1 / 0.05)),
    ]


def check_keras_import(keras_case, traind, work_dir, steps):
    """A Keras model trains for `steps` steps with a Keras optimizer in a
    TensorFlow 2 loop and is saved with its optimizer by tf.train.Checkpoint
    (Keras 3's lists, keyed by the optimizer's path to the model's
    variables; Keras 2's slot variables); `trainctl import` takes it over
    through the checkpoint's object graph and traind trains `steps` more;
    Keras trains the same `steps` more. traind's final checkpoint must hold
    what Keras ends with, its slots in traind's terms."""
    name, module, make_optimizer, optimizer_section, layer_paths, slots, slot_values = keras_case
    directory = fresh_directory(os.path.join(work_dir, name.replace(" ", "_")))
    examples = fashion_mnist(2 * steps * BATCH_SIZE)
    batches = examples.batches(2 * steps, BATCH_SIZE)
    case = Case(name, PERCEPTRON, optimizer_section, None)
    model = module.Sequential([module.Input(examples.input_shape), module.layers.Flatten(),
                               module.layers.Dense(32, activation="relu"),
                               module.layers.Dense(10)])
    optimizer = make_optimizer()
    keras_dir = os.path.join(directory, "keras")
    for step, (inputs, targets) in enumerate(batches):
        if step == steps:
            tf.train.Checkpoint(model=model, optimizer=optimizer).save(
                os.path.join(keras_dir, "ckpt"))
        with tf.GradientTape() as tape:
            loss = training_loss(model(inputs), targets, case.loss)
            # Keras 3's optimizers scale the loss as a LossScaleOptimizer
            # needs (the others by 1); Keras 2's do not.
            if hasattr(optimizer, "scale_loss"):
                loss = optimizer.scale_loss(loss)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))
    expected = {}
    for index, (variable_name, variable) in enumerate(zip(
            ["hidden/kernel", "hidden/bias", "logits/kernel", "logits/bias"],
            model.trainable_variables)):
        expected[variable_name] = variable.numpy()
        for slot, value in zip(slots, slot_values(optimizer, variable, index)):
            expected[f"{variable_name}/{slot}"] = value

    spec = job_spec(case, examples, directory, 2 * steps)
    spec_path = os.path.join(directory, "model.yaml")
    write_file(spec_path, spec_yaml(spec))
    imported_by = run_trainctl(traind, [
        "import", "--model", spec_path, "--layer", f"hidden={layer_paths[0]}",
        "--layer", f"logits={layer_paths[1]}", keras_dir])
    trained = trained_on_from(name, traind, imported_by, spec, spec_path)
    worst = compare(name, trained, expected)
    # And back (docs/checkpoints.md, "Back to Keras"): traind's tensors go
    # into a model of the same layers as they are, and it answers as the
    # model Keras trained on.
    returned = module.models.clone_model(model)
    for layer, layer_name in zip(returned.layers[1:], ["hidden", "logits"]):
        layer.set_weights([trained[f"{layer_name}/kernel"], trained[f"{layer_name}/bias"]])
    inputs = batches[0][0]
    compare(f"{name} back to keras", {"outputs": returned(inputs).numpy()},
            {"outputs": model(inputs).numpy()})
    return worst


def run_checks(traind, work_dir, steps):
    print(f"TensorFlow {tf.__version__}, {steps} steps per check")
    print(f"{'check':42} {'tensor that differs most':40} {'max|diff|':>9} {'relative':>9} "
          f"{'tolerance':>9}")
    for case in training_cases(steps, work_dir):
        print_row(check_case(case, traind, work_dir, steps))
    for case, partitions in import_cases():
        print_row(check_import(case, partitions, traind, work_dir, steps))
        print_row(check_export(case, partitions, traind, work_dir, steps))
    for keras_case in keras_import_cases():
        print_row(check_keras_import(keras_case, traind, work_dir, steps))
    for row in check_initializers(traind, work_dir):
        print_row(row)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traind", required=True, help="the traind binary")
    parser.add_argument("--work-dir", help="keep the specs, logs and checkpoints here "
                        "(default: a temporary directory, removed)")
    parser.add_argument("--steps", type=int, default=30, help="training steps per check")
    args = parser.parse_args()
    # The cluster check takes two workers' batches a step from the 60000.
    if not 1 <= args.steps <= 60000 // (2 * BATCH_SIZE):
        parser.error(f"--steps: expected 1 to {60000 // (2 * BATCH_SIZE)} steps")
    if not os.path.isdir(FASHION_MNIST):
        print(f"FAILED: no Fashion-MNIST in {FASHION_MNIST} (scripts/setup.sh installs Debian's "
              "dataset-fashion-mnist)")
        sys.exit(1)
    traind = os.path.abspath(args.traind)
    if not (os.path.isfile(traind) and os.access(traind, os.X_OK)):
        print(f"FAILED: --traind {args.traind}: not an executable file")
        sys.exit(1)
    started = time.monotonic()
    try:
        if args.work_dir:
            os.makedirs(args.work_dir, exist_ok=True)
            run_checks(traind, os.path.abspath(args.work_dir), args.steps)
        else:
            with tempfile.TemporaryDirectory(prefix="traind-tensorflow-") as work_dir:
                run_checks(traind, work_dir, args.steps)
    except Failure as e:
        print(f"FAILED: {e}")
        sys.exit(1)
    print(f"ok: traind trains as TensorFlow does ({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
