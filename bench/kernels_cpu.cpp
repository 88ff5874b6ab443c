// The CPU layer ops against its yardsticks, in one run:
//   - GEMM through kernels/cpu/ops.hpp against a bare cblas_sgemm loop on the same shapes and
//     buffers, alternated ABBA, median ratio of times (≥ 0.95 expected: the layer adds one call);
//   - every memory-bound op's achieved bandwidth (its own bytes read + written / time) against
//     a measured copy (std::copy of the same number of bytes: read + write).
// Single-threaded, as a rank runs:  build/bench/kernels_cpu [repetitions=15]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "harness/stats.hpp"
#include "kernels/cpu/ops.hpp"

using namespace sax::kernels::cpu;

namespace {

double seconds(const std::function<void()>& f, int iters) {
  f();  // warm
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}
using sax::harness::median;

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 15;
  set_blas_threads(1);  // as a rank runs
  if (reps < 1) {
    std::fprintf(stderr, "usage: kernels_cpu [repetitions>=1]\n");
    return 2;
  }
  std::printf("# GEMM (float32): kernels/cpu gemm against a bare cblas_sgemm, %d ABBA repetitions, medians\n", reps);
  std::printf("#%5s %5s %5s %10s %10s %8s %8s\n", "m", "n", "k", "ops_ms", "bare_ms", "GFLOP/s", "ratio");
  struct Shape {
    int m, n, k;
  };
  // gpt-tiny's QKV and MLP GEMMs on the CPU testbed (b·s = 256 tokens), and two larger squares.
  for (Shape s : {Shape{256, 768, 256}, Shape{256, 1024, 256}, Shape{256, 256, 1024}, Shape{512, 512, 512},
                  Shape{1024, 1024, 1024}}) {
    std::vector<float> a(static_cast<std::size_t>(s.m) * s.k, 0.5f), b(static_cast<std::size_t>(s.k) * s.n, 0.25f),
        c(static_cast<std::size_t>(s.m) * s.n);
    const int iters = std::max(3, static_cast<int>(2e9 / (2.0 * s.m * s.n * s.k)));
    auto ops = [&] { gemm(false, false, s.m, s.n, s.k, a.data(), b.data(), c.data()); };
    auto bare = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), s.n, 0.0f,
                  c.data(), s.n);
    };
    std::vector<double> to, tb, ratio;
    for (int r = 0; r < reps; ++r) {
      double x = 0, y = 0;
      if (r % 2 == 0)
        x = seconds(ops, iters), y = seconds(bare, iters);
      else
        y = seconds(bare, iters), x = seconds(ops, iters);
      to.push_back(x), tb.push_back(y), ratio.push_back(y / x);  // bare / ops: ≥ 0.95 is within 5 %
    }
    std::printf(" %5d %5d %5d %10.3f %10.3f %8.1f %8.3f\n", s.m, s.n, s.k, median(to) * 1e3, median(tb) * 1e3,
                2.0 * s.m * s.n * s.k / median(to) / 1e9, median(ratio));
  }

  // Memory-bound ops on 4096 rows × 2048 (32 MiB per float tensor: beyond the caches).
  const std::int64_t rows = 4096, h = 2048, n = rows * h;
  std::vector<float> x(static_cast<std::size_t>(n), 0.5f), y(static_cast<std::size_t>(n)),
      z(static_cast<std::size_t>(n), 0.25f), w(static_cast<std::size_t>(n), 0.1f), g(static_cast<std::size_t>(h), 1.0f),
      bvec(static_cast<std::size_t>(h), 0.0f), stats(static_cast<std::size_t>(2 * rows)),
      table(static_cast<std::size_t>(rows * 128));
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(n));
  rope_table(rows, 128, 0, 10000.0f, table.data());
  // Token ids (distinct embedding rows; targets inside a vocabulary of h) and a real routing of
  // rows/2 tokens to 2 of 8 experts for the permutation ops.
  const std::int64_t tokens = rows / 2, topk = 2, experts = 8;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(rows)), index(static_cast<std::size_t>(tokens * topk)),
      row_of(index.size());
  for (std::int64_t i = 0; i < rows; ++i) ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % h);
  std::vector<float> logits(static_cast<std::size_t>(tokens * experts)), probs(index.size()), dprobs(index.size());
  router_logits(tokens, experts, 0.0f, 1, logits.data());
  router_topk_forward(tokens, experts, topk, logits.data(), probs.data(), index.data());
  permute_forward(tokens, h, topk, experts, index.data(), x.data(), y.data(), row_of.data());
  std::vector<double> copy_gbs;
  for (int r = 0; r < reps; ++r) {
    Traffic t;
    const double s = seconds([&] { t = copy(n, x.data(), y.data()); }, 5);
    copy_gbs.push_back((t.read + t.written) / s / 1e9);
  }
  const double copy_bw = median(copy_gbs);
  std::printf(
      "\n# memory-bound ops, %lld × %lld float32, median of %d; copy (std::copy of 32 MiB: read + write) = "
      "%.2f GB/s\n#%-28s %10s %8s %8s\n",
      static_cast<long long>(rows), static_cast<long long>(h), reps, copy_bw, "op", "ms", "GB/s", "of copy");
  struct Case {
    const char* name;
    std::function<Traffic()> run;
  };
  const std::vector<Case> cases = {
      {"layer_norm_forward",
       [&] {
         return layer_norm_forward(rows, h, x.data(), g.data(), bvec.data(), y.data(), stats.data(),
                                   stats.data() + rows);
       }},
      {"layer_norm_backward",
       [&] {
         return layer_norm_backward(rows, h, x.data(), z.data(), g.data(), stats.data(), stats.data() + rows, y.data(),
                                    w.data(), w.data() + h);
       }},
      {"rms_norm_forward", [&] { return rms_norm_forward(rows, h, x.data(), g.data(), y.data(), stats.data()); }},
      {"rms_norm_backward",
       [&] { return rms_norm_backward(rows, h, x.data(), z.data(), g.data(), stats.data(), y.data(), w.data()); }},
      {"gelu_forward", [&] { return gelu_forward(rows, h, x.data(), bvec.data(), y.data()); }},
      {"gelu_backward", [&] { return gelu_backward(rows, h, x.data(), bvec.data(), z.data(), y.data()); }},
      {"swiglu_forward", [&] { return swiglu_forward(rows / 2, h, x.data(), nullptr, y.data()); }},
      {"swiglu_backward", [&] { return swiglu_backward(rows / 2, h, x.data(), nullptr, z.data(), y.data()); }},
      {"bias_dropout_add_forward",
       [&] {
         return bias_dropout_add_forward(rows, h, x.data(), bvec.data(), z.data(), y.data(), mask.data(), 0.1f, 7);
       }},
      {"bias_dropout_add_backward",
       [&] { return bias_dropout_add_backward(rows, h, x.data(), mask.data(), 0.1f, y.data(), bvec.data()); }},
      {"dropout_forward", [&] { return dropout_forward(rows, h, x.data(), y.data(), mask.data(), 0.1f, 3); }},
      {"dropout_backward", [&] { return dropout_backward(rows, h, z.data(), mask.data(), 0.1f, y.data()); }},
      {"softmax_forward (causal)",
       [&] {
         std::copy(x.begin(), x.end(), y.begin());
         Traffic t = scale_mask_softmax_forward(rows / h, h, h, 0, 0.125f, y.data());
         t.read += static_cast<double>(n) * 4, t.written += static_cast<double>(n) * 4;  // the copy in
         return t;
       }},
      {"softmax_backward", [&] { return scale_mask_softmax_backward(rows / h, h, h, 0.125f, x.data(), y.data()); }},
      {"rope_forward", [&] { return rope_forward(rows, h / 128, 128, table.data(), y.data()); }},
      {"rope_backward", [&] { return rope_backward(rows, h / 128, 128, table.data(), y.data()); }},
      {"cross_entropy_forward (vocab h)",
       [&] {
         return cross_entropy_forward(rows, h, x.data(), ids.data(), w.data(), stats.data(), stats.data() + rows);
       }},
      {"cross_entropy_backward",
       [&] {
         return cross_entropy_backward(rows, h, x.data(), ids.data(), stats.data(), stats.data() + rows, y.data());
       }},
      {"embedding_forward", [&] { return embedding_forward(rows, h, ids.data(), x.data(), nullptr, y.data()); }},
      {"embedding_backward", [&] { return embedding_backward(rows, h, ids.data(), z.data(), w.data(), nullptr); }},
      {"permute_forward (k 2)",
       [&] { return permute_forward(tokens, h, topk, experts, index.data(), x.data(), y.data(), row_of.data()); }},
      {"permute_backward", [&] { return permute_backward(tokens, h, topk, row_of.data(), y.data(), z.data()); }},
      {"unpermute_forward",
       [&] { return unpermute_forward(tokens, h, topk, row_of.data(), probs.data(), y.data(), z.data()); }},
      {"unpermute_backward",
       [&] {
         return unpermute_backward(tokens, h, topk, row_of.data(), probs.data(), y.data(), z.data(), w.data(),
                                   dprobs.data());
       }},
      {"adam", [&] { return adam(n / 4, y.data(), x.data(), z.data(), w.data(), 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 3); }},
  };
  for (const Case& c : cases) {
    std::vector<double> gbs, ms;
    for (int r = 0; r < reps; ++r) {
      Traffic t;
      const double s = seconds([&] { t = c.run(); }, 3);
      gbs.push_back((t.read + t.written) / s / 1e9), ms.push_back(s * 1e3);
    }
    std::printf(" %-28s %10.2f %8.2f %7.0f%%\n", c.name, median(ms), median(gbs), 100 * median(gbs) / copy_bw);
  }
  return 0;
}
