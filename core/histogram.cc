#include "core/histogram.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

namespace traind {

const std::vector<double>& defaultHistogramEdges() {
  static const std::vector<double> edges = [] {
    std::vector<double> positive;
    for (double edge = 1.0e-12; edge < 1.0e20; edge *= 1.1) positive.push_back(edge);
    positive.push_back(DBL_MAX);
    std::vector<double> all;
    for (auto it = positive.rbegin(); it != positive.rend(); ++it) all.push_back(-*it);
    all.push_back(0.0);
    all.insert(all.end(), positive.begin(), positive.end());
    return all;
  }();
  return edges;
}

namespace {

// The first edge above `x` (as std::upper_bound finds it): estimated from
// x's magnitude, since the edges grow by 10% a bucket, then settled against
// the edges, so that the answer is exact. A chief summarises every
// parameter at a histogram step, holding the step up meanwhile: the
// estimate costs a logarithm a value where a search of 1550 edges costs
// eleven unpredictable branches.
size_t bucketOf(double x, const std::vector<double>& edges) {
  if (std::isnan(x)) return edges.size() - 1;
  const size_t zero = edges.size() / 2;  // the edge 0, the positive ones after it
  const double magnitude = std::abs(x);
  const double steps = magnitude <= 1.0e-12 ? 0.0 : std::log(magnitude / 1.0e-12) / std::log(1.1);
  const size_t k = size_t(std::min(steps, double(zero - 1)));
  size_t i = x > 0 ? zero + 1 + k : zero - std::min(zero, k + 1);
  while (i < edges.size() && edges[i] <= x) ++i;
  while (i > 0 && edges[i - 1] > x) --i;
  return std::min(i, edges.size() - 1);
}

}  // namespace

Histogram summarizeHistogram(std::span<const float> values) {
  const std::vector<double>& edges = defaultHistogramEdges();
  std::vector<double> counts(edges.size(), 0.0);
  Histogram h;
  h.min = values.empty() ? 0.0 : std::numeric_limits<double>::infinity();
  h.max = values.empty() ? 0.0 : -std::numeric_limits<double>::infinity();
  for (const float value : values) {
    const double x = value;
    counts[bucketOf(x, edges)] += 1;
    h.min = std::min(h.min, x);
    h.max = std::max(h.max, x);
    h.sum += x;
    h.sum_squares += x * x;
  }
  h.num = double(values.size());
  for (size_t i = 0; i < edges.size();) {
    double edge = edges[i];
    const double count = counts[i++];
    if (count <= 0.0)  // a run of empty buckets, as one ending where the run ends
      while (i < edges.size() && counts[i] <= 0.0) edge = edges[i++];
    h.bucket_limit.push_back(edge);
    h.bucket.push_back(count);
  }
  return h;
}

}  // namespace traind
