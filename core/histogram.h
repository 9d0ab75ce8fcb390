// A histogram of values as TensorBoard draws one (its Histograms and
// Distributions tabs): TensorFlow's summary of a tensor, with TensorFlow's
// default buckets, so that traind's charts read as a TensorFlow 1 job's
// tf.summary.histogram of its variables did.
//
// The buckets' right edges grow by 10% from 1e-12 to 1e20, mirrored below 0
// around a bucket ending at 0, with DBL_MAX at both ends: about 1550. A value
// falls in the first bucket whose edge is above it. Runs of empty buckets
// are written as one (TensorFlow's EncodeToProto without
// preserve_zero_buckets): a histogram of a layer's weights takes a few
// hundred buckets, not all of them.
#pragma once

#include <span>
#include <vector>

namespace traind {

struct Histogram {
  double min = 0.0, max = 0.0, num = 0.0, sum = 0.0, sum_squares = 0.0;
  std::vector<double> bucket_limit;  // each bucket's right edge, increasing
  std::vector<double> bucket;        // how many values each holds
};

// TensorFlow's default bucket edges.
const std::vector<double>& defaultHistogramEdges();

// `values` summarised; min and max are 0 for none.
Histogram summarizeHistogram(std::span<const float> values);

}  // namespace traind
