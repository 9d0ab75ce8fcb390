#!/usr/bin/env python3
"""Writes test/data/keras_checkpoint/, test/data/keras2_checkpoint/ and
test/data/keras211_checkpoint/, the object-based TensorFlow 2 checkpoints of
a Keras 3 model and its Adam, a Keras 2 model and its RMSprop, and a Keras
2.11 model and its SGD, that test/tensorflow_checkpoint_test.cc and
test/tensorflow_job_test.cc read (CI has no TensorFlow, so their output is
kept in the repository):

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
velocity its value + 200, and its iterations 1200.

The Keras 2 checkpoint (tf_keras, the Keras 2 of tf.keras before Keras 3) is
of the same model, with the same values, saved with
tf_keras.optimizers.legacy.RMSprop(momentum=0.5), whose slots are slot
variables of the object graph: rms is a variable's value + 100, momentum its
value + 200, and its iter 1200. It keeps its rho (0.9) and momentum (0.5) as
variables beside them.

The Keras 2.11 checkpoint (tf_keras.optimizers, tf.keras of TensorFlow 2.11
to 2.15) is of the same model and values, saved with
tf_keras.optimizers.SGD(0.5, momentum=0.9), whose momentums list names each
slot after its variable ("SGD/m/hidden/kernel"): a variable's momentum is
its value + 100, its iterations 1200."""

import os
import shutil

import numpy as np
import tensorflow as tf
import keras

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def counting(first, shape):
    return (first + np.arange(np.prod(shape), dtype=np.float32) / 8).reshape(shape)


def write(checkpoint, directory):
    shutil.rmtree(directory, ignore_errors=True)
    prefix = checkpoint.write(os.path.join(directory, "ckpt"))
    # write() leaves no `checkpoint` file; the tests name the prefix.
    for name, shape in tf.train.list_variables(prefix):
        print(name, shape)


def counted_model(module):
    """The fixtures' model in Keras `module` (keras or tf_keras), each
    variable's values counted from its first."""
    model = module.Sequential([
        module.Input((4,)),
        module.layers.Dense(3, activation="relu", name="hidden"),
        module.layers.Dense(2, name="logits"),
    ])
    for first, variable in enumerate(model.trainable_variables, start=1):
        variable.assign(counting(first, variable.shape))
    return model


def write_keras3():
    model = counted_model(keras)
    adam = keras.optimizers.Adam(1e-3)
    adam.build(model.trainable_variables)
    for variable, momentum, velocity in zip(model.trainable_variables, adam._momentums,
                                            adam._velocities):
        momentum.assign(variable + 100)
        velocity.assign(variable + 200)
    adam.iterations.assign(1200)
    write(tf.train.Checkpoint(model=model, optimizer=adam),
          os.path.join(DATA, "keras_checkpoint"))


def write_keras2():
    import tf_keras
    model = counted_model(tf_keras)
    rmsprop = tf_keras.optimizers.legacy.RMSprop(1e-3, rho=0.9, momentum=0.5)
    # A step of zero gradients makes the optimizer's variables as training
    # does, under its name ("RMSprop/iter"); the values are set after.
    rmsprop.apply_gradients([(tf.zeros_like(v), v) for v in model.trainable_variables])
    for variable in model.trainable_variables:
        rmsprop.get_slot(variable, "rms").assign(variable + 100)
        rmsprop.get_slot(variable, "momentum").assign(variable + 200)
    rmsprop.iterations.assign(1200)
    write(tf.train.Checkpoint(model=model, optimizer=rmsprop),
          os.path.join(DATA, "keras2_checkpoint"))
    print("tf_keras", tf_keras.__version__)


def write_keras211():
    import tf_keras
    model = counted_model(tf_keras)
    sgd = tf_keras.optimizers.SGD(0.5, momentum=0.9)
    # As for Keras 2: the slots made as training makes them, under the
    # optimizer's name ("SGD/m/hidden/kernel").
    sgd.apply_gradients([(tf.zeros_like(v), v) for v in model.trainable_variables])
    for variable, momentum in zip(model.trainable_variables, sgd.momentums):
        momentum.assign(variable + 100)
    sgd.iterations.assign(1200)
    write(tf.train.Checkpoint(model=model, optimizer=sgd),
          os.path.join(DATA, "keras211_checkpoint"))


def main():
    write_keras3()
    write_keras2()
    write_keras211()
    print("tensorflow", tf.__version__, "keras", keras.__version__)


if __name__ == "__main__":
    main()
