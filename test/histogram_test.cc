// core/histogram.h: TensorFlow's histogram of a tensor, as TensorBoard
// draws it (test/tensorboard_interop.py reads traind's through TensorBoard).
#include "core/histogram.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cfloat>
#include <vector>

namespace traind {

TEST_CASE(
    "a histogram counts a value in the first bucket whose edge is above it, "
    "TensorFlow's buckets") {
  const std::vector<double>& edges = defaultHistogramEdges();
  REQUIRE(edges.size() % 2 == 1);
  CHECK(edges.front() == -DBL_MAX);
  CHECK(edges.back() == DBL_MAX);
  CHECK(edges[edges.size() / 2] == 0.0);
  CHECK(edges[edges.size() / 2 + 1] == 1.0e-12);
  CHECK(std::is_sorted(edges.begin(), edges.end()));
  CHECK(std::adjacent_find(edges.begin(), edges.end()) == edges.end());

  const std::vector<float> values = {0.0f, 1.0f, -1.0f, 1.0f, 3.0e-7f};
  const Histogram h = summarizeHistogram(values);
  CHECK(h.num == 5);
  CHECK(h.min == -1.0);
  CHECK(h.max == 1.0);
  CHECK(h.sum == Approx(1.0 + 3.0e-7));
  CHECK(h.sum_squares == Approx(3.0));
  // Each value below the edges it is counted under: the counts up to each
  // edge are the values below it.
  double counted = 0;
  for (size_t i = 0; i < h.bucket.size(); ++i) {
    counted += h.bucket[i];
    const auto below = std::count_if(values.begin(), values.end(),
                                     [&](float x) { return double(x) < h.bucket_limit[i]; });
    CHECK(counted == double(below));
  }
  // Runs of empty buckets are one: four filled buckets, at most five runs around them.
  CHECK(h.bucket.size() <= 4 + 5);
  CHECK(std::count_if(h.bucket.begin(), h.bucket.end(), [](double c) { return c > 0; }) == 4);
  CHECK(h.bucket_limit.back() == DBL_MAX);

  // Values across the whole range, each counted where a search of the
  // edges puts it (the summary finds buckets from a value's magnitude).
  std::vector<float> spread;
  for (double x = 1e-30; x < 1e30; x *= 1.37) {
    spread.push_back(float(x));
    spread.push_back(float(-x));
  }
  spread.push_back(FLT_MAX);
  spread.push_back(-FLT_MAX);
  spread.push_back(1.0e-12f);
  const Histogram wide = summarizeHistogram(spread);
  std::vector<double> expected(edges.size(), 0.0);
  for (float x : spread)
    expected[size_t(std::upper_bound(edges.begin(), edges.end(), double(x)) - edges.begin())] += 1;
  std::vector<double> found(edges.size(), 0.0);
  for (size_t i = 0; i < wide.bucket.size(); ++i)
    found[size_t(std::find(edges.begin(), edges.end(), wide.bucket_limit[i]) - edges.begin())] =
        wide.bucket[i];
  CHECK(found == expected);

  const Histogram none = summarizeHistogram({});
  CHECK(none.num == 0);
  CHECK(none.min == 0);
  CHECK(none.max == 0);
}

}  // namespace traind
