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
#include <utility>
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

struct Shape {
  int m, n, k;
};

// One GEMM shape: kernels/cpu gemm against the bare cblas_sgemm, alternated ABBA.
void gemm_row(Shape s, int reps) {
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

void gemm_table(int reps) {
  std::printf("# GEMM (float32): kernels/cpu gemm against a bare cblas_sgemm, %d ABBA repetitions, medians\n", reps);
  std::printf("#%5s %5s %5s %10s %10s %8s %8s\n", "m", "n", "k", "ops_ms", "bare_ms", "GFLOP/s", "ratio");
  // gpt-tiny's QKV and MLP GEMMs on the CPU testbed (b·s = 256 tokens), and two larger squares.
  for (Shape s : {Shape{256, 768, 256}, Shape{256, 1024, 256}, Shape{256, 256, 1024}, Shape{512, 512, 512},
                  Shape{1024, 1024, 1024}})
    gemm_row(s, reps);
}

// The memory-bound ops' operands: 4096 rows × 2048 (32 MiB per float tensor: beyond the caches),
// token ids (distinct embedding rows; targets inside a vocabulary of h) and a real routing of
// rows/2 tokens to 2 of 8 experts for the permutation ops.
struct Operands {
  const std::int64_t rows = 4096, h = 2048, n = rows * h;
  const std::int64_t tokens = rows / 2, topk = 2, experts = 8;
  std::vector<float> x, y, z, w, g, bvec, stats, table;
  std::vector<std::uint8_t> mask;
  std::vector<std::int32_t> ids, index, row_of;
  std::vector<float> logits, probs, dprobs;

  Operands()
      : x(static_cast<std::size_t>(n), 0.5f),
        y(static_cast<std::size_t>(n)),
        z(static_cast<std::size_t>(n), 0.25f),
        w(static_cast<std::size_t>(n), 0.1f),
        g(static_cast<std::size_t>(h), 1.0f),
        bvec(static_cast<std::size_t>(h), 0.0f),
        stats(static_cast<std::size_t>(2 * rows)),
        table(static_cast<std::size_t>(rows * 128)),
        mask(static_cast<std::size_t>(n)),
        ids(static_cast<std::size_t>(rows)),
        index(static_cast<std::size_t>(tokens * topk)),
        row_of(index.size()),
        logits(static_cast<std::size_t>(tokens * experts)),
        probs(index.size()),
        dprobs(index.size()) {
    rope_table(rows, 128, 0, 10000.0f, table.data());
    for (std::int64_t i = 0; i < rows; ++i) ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % h);
    router_logits(tokens, experts, 0.0f, 1, logits.data());
    router_topk_forward(tokens, experts, topk, logits.data(), probs.data(), index.data());
    permute_forward(tokens, h, topk, experts, index.data(), x.data(), y.data(), row_of.data());
  }
};

struct Case {
  const char* name;
  std::function<Traffic()> run;
};

// The memory-bound ops of a transformer layer (norms, activations, dropout, softmax, RoPE), on m.
std::vector<Case> layer_cases(Operands& m) {
  return {
      {"layer_norm_forward",
       [&m] {
         return layer_norm_forward(m.rows, m.h, m.x.data(), m.g.data(), m.bvec.data(), m.y.data(), m.stats.data(),
                                   m.stats.data() + m.rows);
       }},
      {"layer_norm_backward",
       [&m] {
         return layer_norm_backward(m.rows, m.h, m.x.data(), m.z.data(), m.g.data(), m.stats.data(),
                                    m.stats.data() + m.rows, m.y.data(), m.w.data(), m.w.data() + m.h);
       }},
      {"rms_norm_forward",
       [&m] { return rms_norm_forward(m.rows, m.h, m.x.data(), m.g.data(), m.y.data(), m.stats.data()); }},
      {"rms_norm_backward",
       [&m] {
         return rms_norm_backward(m.rows, m.h, m.x.data(), m.z.data(), m.g.data(), m.stats.data(), m.y.data(),
                                  m.w.data());
       }},
      {"gelu_forward", [&m] { return gelu_forward(m.rows, m.h, m.x.data(), m.bvec.data(), m.y.data()); }},
      {"gelu_backward", [&m] { return gelu_backward(m.rows, m.h, m.x.data(), m.bvec.data(), m.z.data(), m.y.data()); }},
      {"swiglu_forward", [&m] { return swiglu_forward(m.rows / 2, m.h, m.x.data(), nullptr, m.y.data()); }},
      {"swiglu_backward",
       [&m] { return swiglu_backward(m.rows / 2, m.h, m.x.data(), nullptr, m.z.data(), m.y.data()); }},
      {"bias_dropout_add_forward",
       [&m] {
         return bias_dropout_add_forward(m.rows, m.h, m.x.data(), m.bvec.data(), m.z.data(), m.y.data(), m.mask.data(),
                                         0.1f, 7);
       }},
      {"bias_dropout_add_backward",
       [&m] {
         return bias_dropout_add_backward(m.rows, m.h, m.x.data(), m.mask.data(), 0.1f, m.y.data(), m.bvec.data());
       }},
      {"dropout_forward",
       [&m] { return dropout_forward(m.rows, m.h, m.x.data(), m.y.data(), m.mask.data(), 0.1f, 3); }},
      {"dropout_backward", [&m] { return dropout_backward(m.rows, m.h, m.z.data(), m.mask.data(), 0.1f, m.y.data()); }},
      {"softmax_forward (causal)",
       [&m] {
         std::copy(m.x.begin(), m.x.end(), m.y.begin());
         Traffic t = scale_mask_softmax_forward(m.rows / m.h, m.h, m.h, 0, 0, false, 0.125f, m.y.data());
         t.read += static_cast<double>(m.n) * 4, t.written += static_cast<double>(m.n) * 4;  // the copy in
         return t;
       }},
      {"softmax_backward",
       [&m] { return scale_mask_softmax_backward(m.rows / m.h, m.h, m.h, 0.125f, m.x.data(), m.y.data()); }},
      {"rope_forward", [&m] { return rope_forward(m.rows, m.h / 128, 128, m.table.data(), m.y.data()); }},
      {"rope_backward", [&m] { return rope_backward(m.rows, m.h / 128, 128, m.table.data(), m.y.data()); }},
  };
}

// The memory-bound ops outside the layer's core: the loss and the embedding, the MoE permutation
// and the optimizer, on m.
std::vector<Case> model_cases(Operands& m) {
  return {
      {"cross_entropy_forward (vocab h)",
       [&m] {
         return cross_entropy_forward(m.rows, m.h, m.x.data(), m.ids.data(), m.w.data(), m.stats.data(),
                                      m.stats.data() + m.rows);
       }},
      {"cross_entropy_backward",
       [&m] {
         return cross_entropy_backward(m.rows, m.h, m.x.data(), m.ids.data(), m.stats.data(), m.stats.data() + m.rows,
                                       m.y.data());
       }},
      {"embedding_forward",
       [&m] { return embedding_forward(m.rows, m.h, m.ids.data(), m.x.data(), nullptr, m.y.data()); }},
      {"embedding_backward",
       [&m] { return embedding_backward(m.rows, m.h, m.ids.data(), m.z.data(), m.w.data(), nullptr); }},
      {"permute_forward (k 2)",
       [&m] {
         return permute_forward(m.tokens, m.h, m.topk, m.experts, m.index.data(), m.x.data(), m.y.data(),
                                m.row_of.data());
       }},
      {"permute_backward",
       [&m] { return permute_backward(m.tokens, m.h, m.topk, m.row_of.data(), m.y.data(), m.z.data()); }},
      {"unpermute_forward",
       [&m] {
         return unpermute_forward(m.tokens, m.h, m.topk, m.row_of.data(), m.probs.data(), m.y.data(), m.z.data());
       }},
      {"unpermute_backward",
       [&m] {
         return unpermute_backward(m.tokens, m.h, m.topk, m.row_of.data(), m.probs.data(), m.y.data(), m.z.data(),
                                   m.w.data(), m.dprobs.data());
       }},
      {"adam",
       [&m] {
         return adam(m.n / 4, m.y.data(), m.x.data(), m.z.data(), m.w.data(), 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 3);
       }},
  };
}

// The yardstick: std::copy of the same tensor (read + write), GB/s, median of reps.
double copy_bandwidth(Operands& m, int reps) {
  std::vector<double> copy_gbs;
  for (int r = 0; r < reps; ++r) {
    Traffic t;
    const double s = seconds([&] { t = copy(m.n, m.x.data(), m.y.data()); }, 5);
    copy_gbs.push_back((t.read + t.written) / s / 1e9);
  }
  return median(copy_gbs);
}

void memory_bound_table(int reps) {
  Operands m;
  const double copy_bw = copy_bandwidth(m, reps);
  std::printf(
      "\n# memory-bound ops, %lld × %lld float32, median of %d; copy (std::copy of 32 MiB: read + write) = "
      "%.2f GB/s\n#%-28s %10s %8s %8s\n",
      static_cast<long long>(m.rows), static_cast<long long>(m.h), reps, copy_bw, "op", "ms", "GB/s", "of copy");
  std::vector<Case> cases = layer_cases(m);
  for (Case& c : model_cases(m)) cases.push_back(std::move(c));
  for (const Case& c : cases) {
    std::vector<double> gbs, ms;
    for (int r = 0; r < reps; ++r) {
      Traffic t;
      const double s = seconds([&] { t = c.run(); }, 3);
      gbs.push_back((t.read + t.written) / s / 1e9), ms.push_back(s * 1e3);
    }
    std::printf(" %-28s %10.2f %8.2f %7.0f%%\n", c.name, median(ms), median(gbs), 100 * median(gbs) / copy_bw);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 15;
  set_blas_threads(1);  // as a rank runs
  if (reps < 1) {
    std::fprintf(stderr, "usage: kernels_cpu [repetitions>=1]\n");
    return 2;
  }
  gemm_table(reps);
  memory_bound_table(reps);
  return 0;
}
