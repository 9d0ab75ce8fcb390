// gemm_peak: the machine's single-precision GEMM rate, the yardstick that
// bench/compare.py divides the models' GFLOP/s by.
//
//   gemm_peak                 # 1 and 2 threads
//   gemm_peak --threads 1,2,4 --sizes 1024,2048
//
// Times oneDNN's dnnl_sgemm (the GEMM under traind's dense layers) on square
// matrices and prints one JSON line per thread count: the best GFLOP/s of
// each size and the best over all sizes. Best-of-N, not mean, because the
// figure is a ceiling: the other engineers' compilers share these cores.
#include <dnnl.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

// GFLOP/s of C = A * B for n x n matrices on the threads currently set:
// the best of `repeats` timings of about 20 GFLOP each.
double squareGemmGflops(int n, int repeats) {
  const size_t elements = size_t(n) * size_t(n);
  std::vector<float> a(elements), b(elements), c(elements);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (size_t i = 0; i < elements; ++i) {
    a[i] = uniform(rng);
    b[i] = uniform(rng);
  }
  const double flops = 2.0 * double(n) * double(n) * double(n);
  const int calls = std::max(1, int(2e10 / flops));
  auto gemm = [&] {
    dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  gemm();  // JIT-compiles the kernel and faults the pages in
  double best_seconds = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) gemm();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    best_seconds = std::min(best_seconds, elapsed.count() / calls);
  }
  return flops / best_seconds / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gemm_peak: single-precision GEMM GFLOP/s of dnnl_sgemm"};
  std::vector<int> threads{1, 2};
  std::vector<int> sizes{1024, 2048};
  int repeats = 5;
  app.add_option("--threads", threads, "thread counts to time")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--sizes", sizes, "square matrix sizes")
      ->delimiter(',')
      ->check(CLI::Range(16, 8192));
  app.add_option("--repeats", repeats, "timings per size (the best is kept)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  for (const int t : threads) {
    omp_set_num_threads(t);
    std::string by_size;
    double best = 0.0;
    for (const int n : sizes) {
      const double gflops = squareGemmGflops(n, repeats);
      best = std::max(best, gflops);
      char entry[64];
      std::snprintf(entry, sizeof entry, "%s\"%d\": %.1f", by_size.empty() ? "" : ", ", n, gflops);
      by_size += entry;
    }
    std::printf("{\"gemm\": \"dnnl_sgemm\", \"threads\": %d, \"gflops_by_size\": {%s}, "
                "\"gflops\": %.1f}\n",
                t, by_size.c_str(), best);
    std::fflush(stdout);
  }
  return 0;
}
