#!/usr/bin/env python3
"""Writes test/data/keras_checkpoint/, the object-based TensorFlow 2
checkpoint of a Keras 3 model and its optimizer that
test/tensorflow_checkpoint_test.cc reads (CI has no TensorFlow, so its
output is kept in the repository):

    ~/.cache/traind/tensorflow/bin/python3 test/make_keras_checkpoint.py

A Keras 3 Sequential model, Input(4) -> Dense(3, relu, name "hidden") ->
Dense(2, name "logits"), saved with tf.train.Checkpoint(model=model,
optimizer=adam) as a TensorFlow 2 training loop saves it. Such a
checkpoint keys each tensor by the first path to it through the objects
that hold it: the model's variables come first through the optimizer
(optimizer/_trainable_variables/0/.ATTRIBUTES/VARIABLE_VALUE), and only its
object graph (the tensor _CHECKPOINTABLE_OBJECT_GRAPH) says that the same
tensor is model/_functional/_operations/1/_kernel. Every value is set by
hand, so the test can check them exactly: element i of a variable is
first + i / 8 (first: 1, 2, 3, 4 for hidden's kernel and bias, logits'
kernel and bias); Adam's momentum of a variable is its value + 100, its
velocity its value + 200, and its iterations 1200."""

import os
import shutil

import numpy as np
import tensorflow as tf
import keras

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "keras_checkpoint")


def counting(first, shape):
    return (first + np.arange(np.prod(shape), dtype=np.float32) / 8).reshape(shape)


def main():
    model = keras.Sequential([
        keras.Input((4,)),
        keras.layers.Dense(3, activation="relu", name="hidden"),
        keras.layers.Dense(2, name="logits"),
    ])
    for first, variable in enumerate(model.trainable_variables, start=1):
        variable.assign(counting(first, variable.shape))
    adam = keras.optimizers.Adam(1e-3)
    adam.build(model.trainable_variables)
    for variable, momentum, velocity in zip(model.trainable_variables, adam._momentums,
                                            adam._velocities):
        momentum.assign(variable + 100)
        velocity.assign(variable + 200)
    adam.iterations.assign(1200)
    shutil.rmtree(OUT, ignore_errors=True)
    prefix = tf.train.Checkpoint(model=model, optimizer=adam).write(os.path.join(OUT, "ckpt"))
    # write() leaves no `checkpoint` file; the test names the prefix.
    for name, shape in tf.train.list_variables(prefix):
        print(name, shape)
    print("tensorflow", tf.__version__, "keras", keras.__version__)


if __name__ == "__main__":
    main()
