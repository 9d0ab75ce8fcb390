#!/usr/bin/env python3
"""Writes test/data/tensorflow_checkpoint/, the TensorFlow checkpoint that
test/tensorflow_checkpoint_test.cc reads, with TensorFlow's own Saver (CI
has no TensorFlow, so its output is kept in the repository):

    ~/.cache/traind/tensorflow/bin/python3 test/make_tensorflow_checkpoint.py

A TensorFlow 1 graph of the kind traind's users bring: two dense layers
under a variable scope `net` (hidden [4, 3], out [3, 2]) with Adam's slots,
a global step, and a float64 variable, on two devices so that the sharded
Saver writes several data files. hidden/kernel is partitioned in 2 (rows
0-1 and 2-3), as a TensorFlow 1 ps job's partitioner leaves a kernel, and
so is its Adam's slots; net/partitioned [150, 2] in 2 (rows from 0 and
75: a part's key holds its start, and starts from 64 on take two bytes).
Every value is set by hand, so the test can check them exactly: element i
of a tensor is first + i / 8 (first: 1, 2, 3, 4, 5 for hidden/kernel,
hidden/bias, out/kernel, out/bias, partitioned); the global step is 1200."""

import os
import shutil

import numpy as np
import tensorflow as tf

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tensorflow_checkpoint")


def counting(first, shape):
    return (first + np.arange(np.prod(shape), dtype=np.float32) / 8).reshape(shape)


def counting_initializer(first, shape):
    """counting(first, shape), or of a partition its part."""
    whole = counting(first, shape)

    def initialize(part_shape, dtype=None, partition_info=None):
        if partition_info is None:
            return whole
        offset = partition_info.var_offset
        return whole[tuple(slice(o, o + n) for o, n in zip(offset, part_shape))]
    return initialize


def main():
    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4])
        with tf.compat.v1.variable_scope("net"):
            with tf.device("/cpu:0"):
                hidden_kernel = tf.compat.v1.get_variable(
                    "hidden/kernel", shape=[4, 3], initializer=counting_initializer(1, [4, 3]),
                    partitioner=tf.compat.v1.fixed_size_partitioner(2))
                hidden_bias = tf.compat.v1.get_variable("hidden/bias", initializer=counting(2, [3]))
                tf.compat.v1.get_variable("partitioned", shape=[150, 2],
                                          initializer=counting_initializer(5, [150, 2]),
                                          partitioner=tf.compat.v1.fixed_size_partitioner(2))
            with tf.device("/cpu:1"):
                out_kernel = tf.compat.v1.get_variable("out/kernel", initializer=counting(3, [3, 2]))
                out_bias = tf.compat.v1.get_variable("out/bias", initializer=counting(4, [2]))
                tf.compat.v1.get_variable("double", initializer=np.ones([2], np.float64))
        hidden = tf.nn.relu(tf.matmul(x, hidden_kernel) + hidden_bias)
        loss = tf.reduce_sum(tf.matmul(hidden, out_kernel) + out_bias)
        step = tf.compat.v1.train.get_or_create_global_step()
        train = tf.compat.v1.train.AdamOptimizer(0.1).minimize(
            loss, global_step=step, var_list=[*hidden_kernel, hidden_bias, out_kernel, out_bias])
        del train  # its slots are what the checkpoint should hold; no step is taken
        saver = tf.compat.v1.train.Saver(sharded=True, save_relative_paths=True)
        config = tf.compat.v1.ConfigProto(device_count={"CPU": 2})
        with tf.compat.v1.Session(config=config) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(step.assign(1200))
            shutil.rmtree(OUT, ignore_errors=True)
            os.makedirs(OUT)
            prefix = saver.save(session, os.path.join(OUT, "model.ckpt"), global_step=step,
                                write_meta_graph=False)
    print(prefix)
    for name, shape in tf.train.list_variables(prefix):
        print(" ", name, shape)


if __name__ == "__main__":
    main()
