// Random distortions of training images (data.augment), applied to each
// example as the input pipeline gathers its batch, in TensorFlow 1's order:
// crop of the zero-padded image (or a box of random area and aspect ratio
// resized to the window, or a window of the image resized to a random
// scale), left-right flip, brightness, saturation, hue,
// contrast; and the centred crop evaluation takes of a test image
// where training crops a window smaller than the images.
//
// What an example gets is drawn from its own generator, keyed by the seed,
// the epoch and its position in the epoch's order (not the step or the
// worker), so a run resumed from a checkpoint distorts as an uninterrupted
// one did, and the shards of a sync cluster distort the examples of a step
// exactly as a standalone run of the big batch does.
#pragma once

#include <cstdint>
#include <optional>

#include "core/image_resize.h"
#include "core/model_spec.h"
#include "core/random.h"
#include "core/shape.h"

namespace traind {

// The shape of an image of `image` [height, width, channels] once
// distorted: the crop's window [crop_height, crop_width, channels] where
// the crop has a size, else the image's own.
Shape augmentedShape(const Augmentation& augment, const Shape& image);

// The generator's seed for the example at `position` of epoch `epoch`'s order.
uint64_t augmentationKey(uint64_t seed, int64_t epoch, int64_t position);

// A box of an image: its top-left corner and its size, in pixels.
struct ImageBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

// A box of an image of `height` x `width` of the area and aspect ratio
// `augment.boxes()` asks for, drawn from `rng` as
// tf.image.sample_distorted_bounding_box draws one for the whole image: up
// to 100 times an aspect ratio uniform in its range, then a height
// uniform among those whose box's area is in its range and whose width
// (the height times the ratio, rounded) fits, until a box fits; the whole
// image where none did. Its corner is uniform over every place it fits.
ImageBox distortedBox(const Augmentation& augment, int64_t height, int64_t width, Rng& rng);

// Where a window lies in an image resized in proportion: the size the
// image is resized to and the window's top-left corner in that.
struct ScaledWindow {
  int64_t height = 0, width = 0, top = 0, left = 0;
};

// The resize and the window `augment` (Augmentation::scales) draws from
// `rng` for an image of `height` x `width`, as slim's
// vgg_preprocessing.preprocess_for_train draws them: a shorter side
// uniform among the whole lengths of [scale_lower, scale_upper], the other
// side in proportion (sizeWithShorterSide), then the window's corner
// uniform over every place it fits.
ScaledWindow scaledWindow(const Augmentation& augment, int64_t height, int64_t width, Rng& rng);

// Writes `image` of `shape` [height, width, channels] (HWC, row-major),
// distorted with the draws of `key`, to `out`, of augmentedShape(augment,
// shape). The crop's window must lie inside the padded image (0 where it
// lies outside the image itself); a box (augment.boxes(), the key's
// generator's first draws, as distortedBox makes them) is resized to the
// window as tf.image.resize does. A copy when `augment` asks for nothing.
void augmentImage(const Augmentation& augment, const Shape& shape, uint64_t key, const float* image,
                  float* out);

// augmentImage of a training image of its own size (Dataset::own_sizes):
// of `image`, the pixels of `shape` [height, width, channels] as decoded,
// the box the key's generator's first draws give (distortedBox) resized
// to the window, or the window of the image resized as they say
// (scaledWindow, only the window made), with `centres`, as floats / 255,
// to `out`; then flipped and coloured as augmentImage does.
void augmentDecodedImage(const Augmentation& augment, const Shape& shape, PixelCentres centres,
                         uint64_t key, const uint8_t* image, float* out);

// tf.image.adjust_saturation by `saturation` where given (each pixel's HSV
// saturation scaled, then clipped to [0, 1]), then tf.image.adjust_hue by
// `hue` turns (which clips nothing: a pixel with values either side of 0
// has a saturation above 1), of `pixels` RGB pixels in place, in one trip
// through HSV.
void adjustColours(float* rgb, int64_t pixels, std::optional<float> saturation, float hue);

// Writes the window of `window` [height, width, channels] at the centre of
// `image` of `shape` to `out`, as tf.image.resize_image_with_crop_or_pad
// takes it: its top-left corner at ((h - height) / 2, (w - width) / 2) of
// the image, each rounded toward 0; 0 where the window is larger than the
// image.
void centreWindow(const Shape& shape, const Shape& window, const float* image, float* out);

}  // namespace traind
