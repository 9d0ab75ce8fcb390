#!/usr/bin/env python3
"""Writes test/data/tfrecord/, the TFRecord files of tf.train.Example that
test/example_records_test.cc reads, with TensorFlow's own writer (CI has no
TensorFlow, so its output is kept in the repository):

    ~/.cache/traind/tensorflow/bin/python3 test/make_tfrecord_fixture.py

- images-0.tfrecord (raw), images-1.tfrecord.gz (TFRecordOptions GZIP) and
  images-2.tfrecord.zlib (ZLIB): examples as TensorFlow 1's
  convert_to_records.py writes MNIST (height, width, depth, label as int64;
  image_raw as the uint8 pixels' bytes), 7, 5 and 3 of them, images of
  [4, 3, 2]. Pixel j of example i (counted over the files) is
  (7 i + j) % 256; its label is i % 10.
- regression.tfrecord: 3 examples with an `x` float_list of 2 values, 0.5 i
  and -0.25 i, and a `y` float_list of one, i + 0.125.
- png-grey.tfrecord, png-rgb.tfrecord, png-rgba.tfrecord: examples as
  tensorflow_datasets writes them (`image`: tf.io.encode_png's bytes,
  `label`: int64), 3 grey images of [4, 3, 1], 2 RGB of [4, 3, 3] and 1
  RGBA of [2, 2, 4]; pixel j of example i is (7 i + j) % 256, its label i.
- jpeg.tfrecord: examples as TensorFlow 1's build_image_data.py writes
  them (`image/encoded`: tf.io.encode_jpeg's bytes at quality 90,
  `image/class/label`: int64, and image/height, image/width,
  image/channels, image/colorspace, image/format, image/filename), of
  JPEG_SHAPES: colour and grey, baseline and progressive, of several sizes;
  its label is i + 1 (label 0 is left for the background there).
  Beside it, what TensorFlow makes of each image, float32 values in order:
  jpeg-decoded-1.f32 and jpeg-decoded-3.f32, tf.io.decode_jpeg(image,
  channels) / 255 for the images of [4, 3]; jpeg-resized-1.f32 and
  jpeg-resized-3.f32, tf.image.resize(tf.io.decode_jpeg(image, channels),
  [4, 3]) / 255 for every image; jpeg-resized-legacy-3.f32, TensorFlow 1's
  tf.compat.v1.image.resize_images(tf.io.decode_jpeg(image, 3), [4, 3]) /
  255 for every image; jpeg-shorter-side-3.f32 and
  jpeg-shorter-side-legacy-3.f32, each image of the kept jpeg.tfrecord
  decoded to 3 channels, resized so that its shorter side is 5 with its
  aspect kept (slim's vgg_preprocessing._aspect_preserving_resize, by
  tf.image.resize or TensorFlow 1's resize_bilinear), then its centre
  [4, 3] (tf.image.resize_with_crop_or_pad) / 255; and
  jpeg-shorter-side-down-legacy-3.f32, the same by resize_bilinear with
  each side cut down to a whole pixel (the official ResNet's
  imagenet_preprocessing). Only these three:

    ~/.cache/traind/tensorflow/bin/python3 test/make_tfrecord_fixture.py shorter_side

  jpeg-central-fraction-3.f32 and jpeg-central-fraction-legacy-3.f32, each
  image of jpeg.tfrecord decoded to 3 channels, its centre half kept
  (tf.image.central_crop(image, 0.5), inception_preprocessing's
  evaluation), resized to [4, 3] by tf.image.resize or TensorFlow 1's
  resize_bilinear, / 255. Only these two:

    ~/.cache/traind/tensorflow/bin/python3 test/make_tfrecord_fixture.py central_fraction

Each run may write the records in other bytes (an Example's features are a
map, whose order differs from run to run), with the same values: the tests'
byte offsets are those of the files kept here.
"""

import os
import shutil
import sys

import numpy as np
import tensorflow as tf

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tfrecord")
SHAPE = (4, 3, 2)


def int64(value):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def image_example(i):
    pixels = ((7 * i + np.arange(np.prod(SHAPE))) % 256).astype(np.uint8).reshape(SHAPE)
    return tf.train.Example(features=tf.train.Features(feature={
        "height": int64(SHAPE[0]),
        "width": int64(SHAPE[1]),
        "depth": int64(SHAPE[2]),
        "label": int64(i % 10),
        "image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[pixels.tobytes()])),
    }))


def regression_example(i):
    return tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5 * i, -0.25 * i])),
        "y": tf.train.Feature(float_list=tf.train.FloatList(value=[i + 0.125])),
    }))


def png_example(i, shape):
    pixels = ((7 * i + np.arange(np.prod(shape))) % 256).astype(np.uint8).reshape(shape)
    return tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[tf.io.encode_png(pixels).numpy()])),
        "label": int64(i),
    }))


# (height, width, channels, progressive) of jpeg.tfrecord's images.
JPEG_SHAPES = [(4, 3, 3, False), (9, 7, 3, False), (4, 3, 1, False), (12, 10, 1, False),
               (6, 8, 3, True), (2, 2, 3, False)]


def jpeg_images():
    """jpeg.tfrecord's images, encoded: smooth ramps with a little noise,
    as photographs have, so that the JPEGs are not all edges."""
    rng = np.random.default_rng(7)
    images = []
    for i, (height, width, channels, progressive) in enumerate(JPEG_SHAPES):
        y, x, c = np.meshgrid(np.arange(height), np.arange(width), np.arange(channels),
                              indexing="ij")
        pixels = (40 + 150 * (x + y) / (height + width) + 30 * c + 20 * i
                  + rng.normal(0, 6, (height, width, channels)))
        pixels = np.clip(pixels, 0, 255).astype(np.uint8)
        images.append(tf.io.encode_jpeg(pixels, quality=90, progressive=progressive).numpy())
    return images


def jpeg_example(i, jpeg, shape):
    height, width, channels, _ = shape
    text = lambda value: tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    return tf.train.Example(features=tf.train.Features(feature={
        "image/height": int64(height),
        "image/width": int64(width),
        "image/colorspace": text(b"RGB" if channels == 3 else b"Grayscale"),
        "image/channels": int64(channels),
        "image/class/label": int64(i + 1),
        "image/class/text": text(b"class %d" % (i + 1)),
        "image/format": text(b"JPEG"),
        "image/filename": text(b"image-%d.jpg" % i),
        "image/encoded": text(jpeg),
    }))


def write_floats(name, arrays):
    values = np.concatenate([np.asarray(a, np.float32).ravel() for a in arrays])
    values.astype("<f4").tofile(os.path.join(OUT, name))


def write_jpeg_fixture():
    images = jpeg_images()
    write("jpeg.tfrecord", [jpeg_example(i, jpeg, shape)
                            for i, (jpeg, shape) in enumerate(zip(images, JPEG_SHAPES))])
    for channels in (1, 3):
        decoded = [tf.io.decode_jpeg(jpeg, channels=channels) for jpeg in images]
        write_floats(f"jpeg-decoded-{channels}.f32",
                     [d.numpy() / np.float32(255) for d, shape in zip(decoded, JPEG_SHAPES)
                      if shape[:2] == (4, 3)])
        write_floats(f"jpeg-resized-{channels}.f32",
                     [tf.image.resize(d, [4, 3]).numpy() / np.float32(255) for d in decoded])
    decoded = [tf.io.decode_jpeg(jpeg, channels=3) for jpeg in images]
    write_floats("jpeg-resized-legacy-3.f32",
                 [tf.compat.v1.image.resize_images(d, [4, 3]).numpy() / np.float32(255)
                  for d in decoded])


def write_shorter_side_fixture():
    records = tf.data.TFRecordDataset(os.path.join(OUT, "jpeg.tfrecord"))
    images = [tf.io.decode_jpeg(tf.train.Example.FromString(record.numpy()).features
                                .feature["image/encoded"].bytes_list.value[0], channels=3)
              for record in records]

    def aspect_preserving(image, resize, whole=tf.math.rint):
        side = tf.constant(5.0)
        height = tf.cast(tf.shape(image)[0], tf.float32)
        width = tf.cast(tf.shape(image)[1], tf.float32)
        scale = side / width if height > width else side / height
        size = [tf.cast(whole(height * scale), tf.int32), tf.cast(whole(width * scale), tf.int32)]
        centre = tf.image.resize_with_crop_or_pad(resize(image, size), 4, 3)
        return centre.numpy() / np.float32(255)

    write_floats("jpeg-shorter-side-3.f32",
                 [aspect_preserving(image, tf.image.resize) for image in images])
    legacy = lambda image, size: tf.compat.v1.image.resize_bilinear(
        image[None], size, align_corners=False)[0]
    write_floats("jpeg-shorter-side-legacy-3.f32",
                 [aspect_preserving(image, legacy) for image in images])
    # The official ResNet's evaluation: each side cut down (a cast to int32).
    write_floats("jpeg-shorter-side-down-legacy-3.f32",
                 [aspect_preserving(image, legacy, whole=lambda length: length)
                  for image in images])


def write_central_fraction_fixture():
    images = [tf.io.decode_jpeg(tf.train.Example.FromString(record.numpy()).features
                                .feature["image/encoded"].bytes_list.value[0], channels=3)
              for record in tf.data.TFRecordDataset(os.path.join(OUT, "jpeg.tfrecord"))]
    centres = [tf.image.central_crop(image, 0.5) for image in images]
    write_floats("jpeg-central-fraction-3.f32",
                 [tf.image.resize(centre, [4, 3]).numpy() / np.float32(255) for centre in centres])
    write_floats("jpeg-central-fraction-legacy-3.f32",
                 [tf.compat.v1.image.resize_bilinear(centre[None], [4, 3], align_corners=False)[0]
                  .numpy() / np.float32(255) for centre in centres])


def write(name, examples, compression=None):
    options = tf.io.TFRecordOptions(compression_type=compression) if compression else None
    with tf.io.TFRecordWriter(os.path.join(OUT, name), options) as writer:
        for example in examples:
            writer.write(example.SerializeToString())


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    write("images-0.tfrecord", [image_example(i) for i in range(7)])
    write("images-1.tfrecord.gz", [image_example(i) for i in range(7, 12)], "GZIP")
    write("images-2.tfrecord.zlib", [image_example(i) for i in range(12, 15)], "ZLIB")
    write("regression.tfrecord", [regression_example(i) for i in range(3)])
    write("png-grey.tfrecord", [png_example(i, (4, 3, 1)) for i in range(3)])
    write("png-rgb.tfrecord", [png_example(i, (4, 3, 3)) for i in range(2)])
    write("png-rgba.tfrecord", [png_example(0, (2, 2, 4))])
    write_jpeg_fixture()
    write_shorter_side_fixture()
    write_central_fraction_fixture()
    # What TensorFlow reads back is what was written.
    for name, compression, expected in [("images-1.tfrecord.gz", "GZIP", 5),
                                        ("images-2.tfrecord.zlib", "ZLIB", 3)]:
        count = sum(1 for _ in tf.data.TFRecordDataset(os.path.join(OUT, name),
                                                        compression_type=compression))
        assert count == expected, (name, count)


if __name__ == "__main__":
    if sys.argv[1:] == ["shorter_side"]:
        write_shorter_side_fixture()
    elif sys.argv[1:] == ["central_fraction"]:
        write_central_fraction_fixture()
    else:
        main()
