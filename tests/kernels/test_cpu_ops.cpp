// The CPU layer ops: forwards against naive double-precision references on small shapes,
// backwards against central differences of the forwards (tolerances below, float32 data),
// flash attention against the unfused one. (The bytes each op reports against the workload's:
// tests/harness/test_op_runner.cpp, through the op runner that maps workload ops to kernels.)
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cpu/ops.hpp"

using namespace sax::kernels::cpu;
using Vec = std::vector<float>;

namespace {

Vec random_vec(std::size_t n, unsigned seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  Vec v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// max |a − b| / (1 + |b|) over the elements.
double rel_err(const Vec& a, const std::vector<double>& b) {
  double e = 0;
  for (std::size_t i = 0; i < a.size(); ++i) e = std::max(e, std::abs(a[i] - b[i]) / (1 + std::abs(b[i])));
  return e;
}
double rel_err(const Vec& a, const Vec& b) { return rel_err(a, std::vector<double>(b.begin(), b.end())); }

// d/dx of L = Σ w·f(x) by central differences, one element at a time (h = 1e-2 in float32
// data: the truncation error of smooth ops is O(h²)).
std::vector<double> numeric_grad(Vec x, const Vec& w, const std::function<Vec(const Vec&)>& f) {
  std::vector<double> g(x.size());
  const float h = 1e-2f;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float keep = x[i];
    x[i] = keep + h;
    const Vec up = f(x);
    x[i] = keep - h;
    const Vec down = f(x);
    x[i] = keep;
    double d = 0;
    for (std::size_t j = 0; j < w.size(); ++j) d += static_cast<double>(w[j]) * (up[j] - down[j]);
    g[i] = d / (2 * h);
  }
  return g;
}

constexpr double kForwardTol = 1e-5;  // float32 against double
constexpr double kGradTol = 2e-3;     // float32 central differences with h = 1e-2

}  // namespace

TEST(CpuOps, GemmMatchesTheNaiveProductInEveryTransposition) {
  const std::int64_t m = 7, n = 5, k = 9;
  const Vec a = random_vec(m * k, 1), b = random_vec(k * n, 2);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      std::vector<double> want(m * n, 0);
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j)
          for (std::int64_t l = 0; l < k; ++l)
            want[i * n + j] +=
                static_cast<double>(ta ? a[l * m + i] : a[i * k + l]) * (tb ? b[j * k + l] : b[l * n + j]);
      Vec c(m * n);
      const Traffic t = gemm(ta, tb, m, n, k, a.data(), b.data(), c.data());
      EXPECT_LT(rel_err(c, want), kForwardTol) << ta << tb;
      EXPECT_EQ(t.read, 4.0 * (m * k + k * n));
      EXPECT_EQ(t.written, 4.0 * m * n);
    }
}

TEST(CpuOps, LinearBackwardIsTheGradientOfTheForward) {
  const std::int64_t m = 4, n = 3, k = 5;
  const Vec x = random_vec(m * k, 3), w = random_vec(k * n, 4), dy = random_vec(m * n, 5);
  Vec dx(m * k), dw(k * n);
  linear_backward_input(m, n, k, dy.data(), w.data(), dx.data());
  linear_backward_weight(m, n, k, x.data(), dy.data(), dw.data());
  auto fx = [&](const Vec& xx) {
    Vec y(m * n);
    linear_forward(m, n, k, xx.data(), w.data(), y.data());
    return y;
  };
  auto fw = [&](const Vec& ww) {
    Vec y(m * n);
    linear_forward(m, n, k, x.data(), ww.data(), y.data());
    return y;
  };
  EXPECT_LT(rel_err(dx, numeric_grad(x, dy, fx)), kGradTol);
  EXPECT_LT(rel_err(dw, numeric_grad(w, dy, fw)), kGradTol);
}

TEST(CpuOps, NormsMatchTheirDefinitionAndTheirGradients) {
  const std::int64_t rows = 3, h = 8;
  const Vec x = random_vec(rows * h, 6), g = random_vec(h, 7, 0.5f, 1.5f), be = random_vec(h, 8),
            dy = random_vec(rows * h, 9);
  Vec y(rows * h), mean(rows), rstd(rows);
  layer_norm_forward(rows, h, x.data(), g.data(), be.data(), y.data(), mean.data(), rstd.data(), 1e-5f);
  std::vector<double> want(rows * h);
  for (std::int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (std::int64_t j = 0; j < h; ++j) mu += x[r * h + j] / static_cast<double>(h);
    for (std::int64_t j = 0; j < h; ++j) var += std::pow(x[r * h + j] - mu, 2) / static_cast<double>(h);
    for (std::int64_t j = 0; j < h; ++j) want[r * h + j] = (x[r * h + j] - mu) / std::sqrt(var + 1e-5) * g[j] + be[j];
  }
  EXPECT_LT(rel_err(y, want), kForwardTol);
  Vec dx(rows * h), dg(h), db(h);
  layer_norm_backward(rows, h, x.data(), dy.data(), g.data(), mean.data(), rstd.data(), dx.data(), dg.data(),
                      db.data());
  EXPECT_LT(rel_err(dx, numeric_grad(x, dy,
                                     [&](const Vec& xx) {
                                       Vec yy(rows * h), m2(rows), r2(rows);
                                       layer_norm_forward(rows, h, xx.data(), g.data(), be.data(), yy.data(), m2.data(),
                                                          r2.data(), 1e-5f);
                                       return yy;
                                     })),
            kGradTol);
  EXPECT_LT(rel_err(dg, numeric_grad(g, dy,
                                     [&](const Vec& gg) {
                                       Vec yy(rows * h), m2(rows), r2(rows);
                                       layer_norm_forward(rows, h, x.data(), gg.data(), be.data(), yy.data(), m2.data(),
                                                          r2.data(), 1e-5f);
                                       return yy;
                                     })),
            kGradTol);
  // RMSNorm.
  Vec yr(rows * h), rs(rows), dxr(rows * h), dgr(h);
  rms_norm_forward(rows, h, x.data(), g.data(), yr.data(), rs.data(), 1e-5f);
  for (std::int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (std::int64_t j = 0; j < h; ++j) ms += std::pow(x[r * h + j], 2) / static_cast<double>(h);
    for (std::int64_t j = 0; j < h; ++j) want[r * h + j] = x[r * h + j] / std::sqrt(ms + 1e-5) * g[j];
  }
  EXPECT_LT(rel_err(yr, want), kForwardTol);
  rms_norm_backward(rows, h, x.data(), dy.data(), g.data(), rs.data(), dxr.data(), dgr.data());
  EXPECT_LT(rel_err(dxr, numeric_grad(x, dy,
                                      [&](const Vec& xx) {
                                        Vec yy(rows * h), r2(rows);
                                        rms_norm_forward(rows, h, xx.data(), g.data(), yy.data(), r2.data(), 1e-5f);
                                        return yy;
                                      })),
            kGradTol);
}

TEST(CpuOps, ActivationsMatchTheirDefinitionAndTheirGradients) {
  const std::int64_t rows = 3, cols = 4;
  const Vec x = random_vec(rows * cols, 10, -3, 3), bias = random_vec(cols, 11), dy = random_vec(rows * cols, 12);
  Vec y(rows * cols), dx(rows * cols);
  gelu_forward(rows, cols, x.data(), bias.data(), y.data());
  std::vector<double> want(rows * cols);
  for (std::int64_t i = 0; i < rows * cols; ++i) {
    const double v = x[i] + bias[i % cols];
    want[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  EXPECT_LT(rel_err(y, want), kForwardTol);
  gelu_backward(rows, cols, x.data(), bias.data(), dy.data(), dx.data());
  EXPECT_LT(rel_err(dx, numeric_grad(x, dy,
                                     [&](const Vec& xx) {
                                       Vec yy(rows * cols);
                                       gelu_forward(rows, cols, xx.data(), bias.data(), yy.data());
                                       return yy;
                                     })),
            kGradTol);
  const Vec x2 = random_vec(rows * 2 * cols, 13, -3, 3);
  Vec ys(rows * cols), dxs(rows * 2 * cols);
  swiglu_forward(rows, cols, x2.data(), nullptr, ys.data());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < cols; ++j) {
      const double g = x2[r * 2 * cols + j], u = x2[r * 2 * cols + cols + j];
      want[r * cols + j] = g / (1 + std::exp(-g)) * u;
    }
  EXPECT_LT(rel_err(ys, want), kForwardTol);
  swiglu_backward(rows, cols, x2.data(), nullptr, dy.data(), dxs.data());
  EXPECT_LT(rel_err(dxs, numeric_grad(x2, dy,
                                      [&](const Vec& xx) {
                                        Vec yy(rows * cols);
                                        swiglu_forward(rows, cols, xx.data(), nullptr, yy.data());
                                        return yy;
                                      })),
            kGradTol);
}

TEST(CpuOps, DropoutKeepsAboutOneMinusPAndItsBackwardUsesTheMask) {
  const std::int64_t n = 100000;
  const Vec x(n, 1.0f);
  Vec y(n), dx(n);
  std::vector<std::uint8_t> mask(n);
  dropout_forward(1, n, x.data(), y.data(), mask.data(), 0.1f, 42);
  double kept = 0, sum = 0;
  for (std::int64_t i = 0; i < n; ++i) kept += mask[i], sum += y[i];
  EXPECT_NEAR(kept / n, 0.9, 0.005);  // 0.9 ± 5.5 standard deviations of a binomial mean
  EXPECT_NEAR(sum / n, 1.0, 0.006);   // kept elements scaled by 1/(1 − p)
  dropout_backward(1, n, x.data(), mask.data(), 0.1f, dx.data());
  EXPECT_EQ(dx, y);
  // Bias-dropout-add with p = 0: out = residual + y + bias, and dy = dout.
  const Vec r = random_vec(6, 14), yy = random_vec(6, 15), b = random_vec(3, 16);
  Vec out(6), dy(6), db(3);
  bias_dropout_add_forward(2, 3, yy.data(), b.data(), r.data(), out.data(), nullptr, 0.0f, 1);
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(out[i], r[i] + yy[i] + b[i % 3]);
  bias_dropout_add_backward(2, 3, r.data(), nullptr, 0.0f, dy.data(), db.data());
  EXPECT_EQ(dy, r);
  for (int j = 0; j < 3; ++j) EXPECT_FLOAT_EQ(db[j], r[j] + r[3 + j]);
}

TEST(CpuOps, SoftmaxAndRopeMatchTheirDefinitionAndTheirGradients) {
  const std::int64_t sq = 3, sk = 5;
  const Vec s = random_vec(sq * sk, 17, -2, 2), dy = random_vec(sq * sk, 18);
  auto f = [&](const Vec& ss) {
    Vec p = ss;
    scale_mask_softmax_forward(1, sq, sk, sk - sq, 0, false, 0.5f, p.data());
    return p;
  };
  const Vec p = f(s);
  for (std::int64_t i = 0; i < sq; ++i) {
    const std::int64_t visible = sk - sq + i + 1;
    double sum = 0;
    for (std::int64_t j = 0; j < visible; ++j) sum += std::exp(0.5 * s[i * sk + j]);
    for (std::int64_t j = 0; j < sk; ++j)
      EXPECT_NEAR(p[i * sk + j], j < visible ? std::exp(0.5 * s[i * sk + j]) / sum : 0.0, 1e-6);
  }
  Vec ds = dy;
  scale_mask_softmax_backward(1, sq, sk, 0.5f, p.data(), ds.data());
  EXPECT_LT(rel_err(ds, numeric_grad(s, dy, f)), kGradTol);
  // A sliding window of 1 key before the query, and a sink: row i keeps keys i' − 1 and i' (i' =
  // sk − sq + i), over a denominator that holds exp(0) besides them.
  auto g = [&](const Vec& ss) {
    Vec w = ss;
    scale_mask_softmax_forward(1, sq, sk, sk - sq, 1, true, 0.5f, w.data());
    return w;
  };
  const Vec w = g(s);
  for (std::int64_t i = 0; i < sq; ++i) {
    const std::int64_t last = sk - sq + i;
    double sum = 1;
    for (std::int64_t j = last - 1; j <= last; ++j) sum += std::exp(0.5 * s[i * sk + j]);
    for (std::int64_t j = 0; j < sk; ++j)
      EXPECT_NEAR(w[i * sk + j], j >= last - 1 && j <= last ? std::exp(0.5 * s[i * sk + j]) / sum : 0.0, 1e-6)
          << "row " << i << " key " << j;
  }
  Vec dw = dy;
  scale_mask_softmax_backward(1, sq, sk, 0.5f, w.data(), dw.data());
  EXPECT_LT(rel_err(dw, numeric_grad(s, dy, g)), kGradTol);
  // RoPE: a rotation (norm kept), undone by its backward.
  const std::int64_t tokens = 4, heads = 2, d = 8;
  Vec table(tokens * d);
  rope_table(tokens, d, 3, 10000.0f, table.data());
  const Vec x = random_vec(tokens * heads * d, 19);
  Vec r = x;
  rope_forward(tokens, heads, d, table.data(), r.data());
  EXPECT_NEAR(std::inner_product(r.begin(), r.end(), r.begin(), 0.0),
              std::inner_product(x.begin(), x.end(), x.begin(), 0.0), 1e-4);
  EXPECT_NEAR(r[0], x[0] * std::cos(3.0) - x[4] * std::sin(3.0), 1e-5);  // token 0 at position 3, frequency 0
  rope_backward(tokens, heads, d, table.data(), r.data());
  EXPECT_LT(rel_err(r, x), 1e-6);
}

TEST(CpuOps, FlashAttentionEqualsTheUnfusedOneForwardAndBackward) {
  // GQA (4 query heads over 2 KV heads), causal, queries the last 70 of 150 positions: blocks of
  // 64 split both the queries and the keys unevenly. Then multi-head latent attention's shape:
  // query-key heads of 24, values of 16. Then sliding windows (20 keys, narrower than a block; 100,
  // wider), with and without a sink.
  for (const AttentionShape s :
       {AttentionShape{2, 4, 2, 70, 150, 16}, AttentionShape{2, 4, 4, 70, 150, 24, 16},
        AttentionShape{2, 4, 2, 70, 150, 16, 0, 20}, AttentionShape{2, 4, 2, 150, 150, 16, 0, 100, true},
        AttentionShape{1, 2, 1, 70, 150, 16, 0, 0, true}}) {
    const std::size_t nq = s.b * s.sq * s.heads * s.d, nk = s.b * s.sk * s.kv_heads * s.d,
                      nv = s.b * s.sk * s.kv_heads * s.v_dim(), no = s.b * s.sq * s.heads * s.v_dim();
    const Vec q = random_vec(nq, 20), k = random_vec(nk, 21), v = random_vec(nv, 22), dout = random_vec(no, 23);
    Vec scores(s.b * s.heads * s.sq * s.sk), o1(no), o2(no), lse(s.b * s.heads * s.sq);
    const Traffic unfused = attention_unfused_forward(s, q.data(), k.data(), v.data(), scores.data(), o1.data());
    const Traffic flash = attention_flash_forward(s, q.data(), k.data(), v.data(), o2.data(), lse.data());
    EXPECT_LT(rel_err(o2, o1), 1e-5);
    EXPECT_DOUBLE_EQ(unfused.flops, 2.0 * s.b * s.heads * s.sq * s.sk * (s.d + s.v_dim()));  // both products
    EXPECT_LE(flash.flops, unfused.flops);  // the causal blocks past the last query skipped
    if (s.window > 0) {                     // and the blocks before the first query's window
      AttentionShape causal = s;
      causal.window = 0;
      Vec oc(no), lc(lse.size());
      EXPECT_LT(flash.flops, attention_flash_forward(causal, q.data(), k.data(), v.data(), oc.data(), lc.data()).flops);
    }
    Vec scratch(s.sq * s.sk), dq1(nq), dk1(nk), dv1(nv), dq2(nq), dk2(nk), dv2(nv);
    attention_unfused_backward(s, q.data(), k.data(), v.data(), scores.data(), dout.data(), scratch.data(), dq1.data(),
                               dk1.data(), dv1.data());
    attention_flash_backward(s, q.data(), k.data(), v.data(), o2.data(), dout.data(), lse.data(), dq2.data(),
                             dk2.data(), dv2.data());
    EXPECT_LT(rel_err(dq2, dq1), 1e-4);
    EXPECT_LT(rel_err(dk2, dk1), 1e-4);
    EXPECT_LT(rel_err(dv2, dv1), 1e-4);
  }
}

TEST(CpuOps, UnfusedAttentionBackwardIsTheGradient) {
  // Heads of one dimension, and query-key heads of 6 with values of 4 (latent attention's shape).
  // Then a window of 1 key with a sink.
  for (const AttentionShape s : {AttentionShape{1, 2, 1, 3, 5, 4}, AttentionShape{1, 2, 2, 3, 5, 6, 4},
                                 AttentionShape{1, 2, 1, 3, 5, 4, 0, 1, true}}) {
    const std::size_t nq = s.b * s.sq * s.heads * s.d, nk = s.b * s.sk * s.kv_heads * s.d,
                      nv = s.b * s.sk * s.kv_heads * s.v_dim(), no = s.b * s.sq * s.heads * s.v_dim();
    const Vec q = random_vec(nq, 24), k = random_vec(nk, 25), v = random_vec(nv, 26), dout = random_vec(no, 27);
    Vec scores(s.b * s.heads * s.sq * s.sk), o(no);
    auto run = [&](const Vec& qq, const Vec& kk, const Vec& vv) {
      Vec sc(scores.size()), out(no);
      attention_unfused_forward(s, qq.data(), kk.data(), vv.data(), sc.data(), out.data());
      return out;
    };
    attention_unfused_forward(s, q.data(), k.data(), v.data(), scores.data(), o.data());
    Vec scratch(s.sq * s.sk), dq(nq), dk(nk), dv(nv);
    attention_unfused_backward(s, q.data(), k.data(), v.data(), scores.data(), dout.data(), scratch.data(), dq.data(),
                               dk.data(), dv.data());
    EXPECT_LT(rel_err(dq, numeric_grad(q, dout, [&](const Vec& x) { return run(x, k, v); })), kGradTol);
    EXPECT_LT(rel_err(dk, numeric_grad(k, dout, [&](const Vec& x) { return run(q, x, v); })), kGradTol);
    EXPECT_LT(rel_err(dv, numeric_grad(v, dout, [&](const Vec& x) { return run(q, k, x); })), kGradTol);
  }
}

TEST(CpuOps, CrossEntropyRouterAndPermutationMatchTheirDefinitionAndGradients) {
  const std::int64_t rows = 3, vocab = 6;
  const Vec z = random_vec(rows * vocab, 28, -2, 2);
  const std::vector<std::int32_t> target{1, 5, 0};
  Vec loss(rows), mx(rows), sum(rows), dz(rows * vocab);
  cross_entropy_forward(rows, vocab, z.data(), target.data(), loss.data(), mx.data(), sum.data());
  for (std::int64_t r = 0; r < rows; ++r) {
    double se = 0;
    for (std::int64_t j = 0; j < vocab; ++j) se += std::exp(z[r * vocab + j]);
    EXPECT_NEAR(loss[r], std::log(se) - z[r * vocab + target[r]], 1e-5);
  }
  cross_entropy_backward(rows, vocab, z.data(), target.data(), mx.data(), sum.data(), dz.data());
  const Vec mean_w(rows, 1.0f / rows);
  EXPECT_LT(rel_err(dz, numeric_grad(z, mean_w,
                                     [&](const Vec& zz) {
                                       Vec l(rows), a(rows), b(rows);
                                       cross_entropy_forward(rows, vocab, zz.data(), target.data(), l.data(), a.data(),
                                                             b.data());
                                       return l;
                                     })),
            kGradTol);
  // Router: top-2 of 4 by probability; its backward against differences (the choice held fixed).
  const std::int64_t tokens = 3, experts = 4, k = 2;
  const Vec lg = random_vec(tokens * experts, 29, -2, 2), dp = random_vec(tokens * k, 30);
  Vec probs(tokens * k), dlg(tokens * experts);
  std::vector<std::int32_t> index(tokens * k);
  router_topk_forward(tokens, experts, k, lg.data(), probs.data(), index.data());
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::vector<double> p(experts);
    double se = 0;
    for (std::int64_t e = 0; e < experts; ++e) se += p[e] = std::exp(lg[t * experts + e]);
    std::vector<int> order{0, 1, 2, 3};
    std::sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    EXPECT_EQ(index[t * k], order[0]);
    EXPECT_EQ(index[t * k + 1], order[1]);
    EXPECT_NEAR(probs[t * k], p[order[0]] / se, 1e-6);
  }
  router_topk_backward(tokens, experts, k, lg.data(), dp.data(), index.data(), dlg.data());
  EXPECT_LT(rel_err(dlg, numeric_grad(lg, dp,
                                      [&](const Vec& l) {  // probabilities of the experts chosen at lg
                                        Vec out(tokens * k);
                                        for (std::int64_t t = 0; t < tokens; ++t) {
                                          double se = 0;
                                          for (std::int64_t e = 0; e < experts; ++e) se += std::exp(l[t * experts + e]);
                                          for (std::int64_t j = 0; j < k; ++j)
                                            out[t * k + j] =
                                                static_cast<float>(std::exp(l[t * experts + index[t * k + j]]) / se);
                                        }
                                        return out;
                                      })),
            kGradTol);
  // Permute then unpermute with probabilities 1/k: the identity on token rows.
  const std::int64_t h = 5;
  const Vec x = random_vec(tokens * h, 31);
  Vec routed(tokens * k * h), back(tokens * h);
  std::vector<std::int32_t> row_of(tokens * k);
  permute_forward(tokens, h, k, experts, index.data(), x.data(), routed.data(), row_of.data());
  for (std::int64_t i = 1; i < tokens * k; ++i)  // grouped by expert
    EXPECT_LE(index[std::find(row_of.begin(), row_of.end(), i - 1) - row_of.begin()],
              index[std::find(row_of.begin(), row_of.end(), i) - row_of.begin()]);
  const Vec half(tokens * k, 0.5f);
  unpermute_forward(tokens, h, k, row_of.data(), half.data(), routed.data(), back.data());
  EXPECT_LT(rel_err(back, x), 1e-6);
}

TEST(CpuOps, AdamMatchesItsUpdateRule) {
  Vec p{1.0f, -2.0f}, m{0.1f, 0.0f}, v{0.01f, 0.0f};
  const Vec g{0.5f, -1.0f};
  adam(2, p.data(), g.data(), m.data(), v.data(), 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 2);
  const double m0 = 0.9 * 0.1 + 0.1 * 0.5, v0 = 0.999 * 0.01 + 0.001 * 0.25;
  const double want = 1.0 - 0.1 * ((m0 / (1 - 0.81)) / (std::sqrt(v0 / (1 - 0.999 * 0.999)) + 1e-8) + 0.01 * 1.0);
  EXPECT_NEAR(p[0], want, 1e-6);
  EXPECT_NEAR(m[0], m0, 1e-7);
  EXPECT_NEAR(v[0], v0, 1e-7);
}
