// The ops interface (kernels/ops.hpp): every CUDA op against the CPU op of the same name on the
// same inputs (inputs rounded to bf16 first, so that both sides see the same numbers; tolerance
// |cuda − cpu| ≤ 3e-2·(1 + |cpu|), bf16's 8-bit mantissa with float32 accumulation), skipped with
// the reason where no CUDA device is usable; and, on every machine, the CPU backend behind the
// interface: grouped GEMMs equal to one GEMM per group, and a CUDA request refused where there
// is no device.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "collectives/bf16.hpp"
#include "kernels/ops.hpp"

using sax::Backend;
using sax::kernels::AttentionShape;
using sax::kernels::Buffer;
using sax::kernels::Device;
using sax::kernels::Ops;
using Vec = std::vector<float>;

namespace {

Vec random_vec(std::size_t n, unsigned seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  Vec v(n);
  for (float& x : v) x = sax::coll::bf16_to_float(sax::coll::float_to_bf16(u(rng)));  // exact in bf16
  return v;
}

// One backend: its device, its ops, and the buffers a test made on it.
struct Side {
  explicit Side(Backend b) : device(sax::kernels::make_device(b)), ops(sax::kernels::make_ops(*device)) {}
  std::unique_ptr<Device> device;
  std::unique_ptr<Ops> ops;
  std::vector<std::unique_ptr<Buffer>> held;
  std::map<const void*, Buffer*> of;

  void* raw(std::size_t bytes) {
    held.push_back(device->allocate(bytes));
    of[held.back()->data()] = held.back().get();
    return held.back()->data();
  }
  void* act(const Vec& v) {
    void* p = raw(v.size() * 4);
    ops->upload(p, v.data(), static_cast<std::int64_t>(v.size()));
    return p;
  }
  void* act(std::size_t n) { return act(Vec(n, 0.0f)); }
  float* f32(const Vec& v) {
    void* p = raw(v.size() * 4);
    of[p]->upload(v.data(), v.size() * 4);
    return static_cast<float*>(p);
  }
  float* f32(std::size_t n) { return f32(Vec(n, 0.0f)); }
  std::int32_t* ints(const std::vector<std::int32_t>& v) {
    void* p = raw(v.size() * 4);
    of[p]->upload(v.data(), v.size() * 4);
    return static_cast<std::int32_t*>(p);
  }
  std::uint8_t* bytes(std::size_t n) { return static_cast<std::uint8_t*>(raw(n)); }

  Vec read_act(const void* p, std::size_t n) {
    device->synchronize(device->compute_stream());
    Vec v(n);
    ops->download(p, v.data(), static_cast<std::int64_t>(n));
    return v;
  }
  Vec read_f32(const void* p, std::size_t n) {
    device->synchronize(device->compute_stream());
    Vec v(n);
    of.at(p)->download(v.data(), n * 4);
    return v;
  }
  std::vector<std::int32_t> read_ints(const void* p, std::size_t n) {
    device->synchronize(device->compute_stream());
    std::vector<std::int32_t> v(n);
    of.at(p)->download(v.data(), n * 4);
    return v;
  }
};

using Outputs = std::map<std::string, Vec>;

// Runs `f` on the CPU and on CUDA device 0 and compares every output.
void same_on_both(const std::function<Outputs(Side&)>& f, double tol = 3e-2) {
  Side cpu(Backend::cpu), gpu(Backend::cuda);
  const Outputs a = f(cpu), b = f(gpu);
  for (const auto& [name, want] : a) {
    const Vec& got = b.at(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    double worst = 0;
    std::size_t at = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double e = std::abs(got[i] - want[i]) / (1 + std::abs(want[i]));
      if (!(e <= worst)) worst = e, at = i;
    }
    EXPECT_LE(worst, tol) << name << ": element " << at << " cuda " << got[at] << " cpu " << want[at];
  }
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto d = sax::kernels::cuda_devices();
    if (d.count == 0) GTEST_SKIP() << "no CUDA device: " << (d.compiled ? d.reason : "built without CUDA");
  }
};

}  // namespace

TEST_F(CudaOps, Linear) {
  const std::int64_t m = 37, n = 45, k = 64;
  const Vec x = random_vec(m * k, 1), w = random_vec(k * n, 2), dy = random_vec(m * n, 3);
  same_on_both([&](Side& s) {
    void *y = s.act(m * n), *dx = s.act(m * k), *dw = s.act(k * n);
    s.ops->linear_forward(m, n, k, s.act(x), s.act(w), y);
    s.ops->linear_backward_input(m, n, k, s.act(dy), s.act(w), dx);
    s.ops->linear_backward_weight(m, n, k, s.act(x), s.act(dy), dw);
    return Outputs{{"y", s.read_act(y, m * n)}, {"dx", s.read_act(dx, m * k)}, {"dw", s.read_act(dw, k * n)}};
  });
}

TEST_F(CudaOps, GroupedLinear) {
  const std::vector<std::int64_t> rows = {5, 0, 17, 3};
  const std::int64_t m = 25, n = 16, k = 24, g = 4;
  const Vec x = random_vec(m * k, 4), w = random_vec(g * k * n, 5), dy = random_vec(m * n, 6);
  same_on_both([&](Side& s) {
    void *y = s.act(m * n), *dx = s.act(m * k), *dw = s.act(g * k * n);
    s.ops->grouped_linear_forward(rows, n, k, s.act(x), s.act(w), y);
    s.ops->grouped_linear_backward_input(rows, n, k, s.act(dy), s.act(w), dx);
    s.ops->grouped_linear_backward_weight(rows, n, k, s.act(x), s.act(dy), dw);
    return Outputs{{"y", s.read_act(y, m * n)}, {"dx", s.read_act(dx, m * k)}, {"dw", s.read_act(dw, g * k * n)}};
  });
}

TEST_F(CudaOps, Norms) {
  const std::int64_t rows = 7, h = 300;
  const Vec x = random_vec(rows * h, 7), g = random_vec(h, 8, 0.5f, 1.5f), b = random_vec(h, 9),
            dy = random_vec(rows * h, 10);
  same_on_both([&](Side& s) {
    void *y = s.act(rows * h), *dx = s.act(rows * h), *y2 = s.act(rows * h), *dx2 = s.act(rows * h);
    float *mean = s.f32(rows), *rstd = s.f32(rows), *dg = s.f32(h), *db = s.f32(h), *rstd2 = s.f32(rows),
          *dg2 = s.f32(h);
    void *X = s.act(x), *G = s.act(g), *Bt = s.act(b), *DY = s.act(dy);
    s.ops->layer_norm_forward(rows, h, X, G, Bt, y, mean, rstd);
    s.ops->layer_norm_backward(rows, h, X, DY, G, mean, rstd, dx, dg, db);
    s.ops->rms_norm_forward(rows, h, X, G, y2, rstd2);
    s.ops->rms_norm_backward(rows, h, X, DY, G, rstd2, dx2, dg2);
    return Outputs{{"ln.y", s.read_act(y, rows * h)},     {"ln.dx", s.read_act(dx, rows * h)},
                   {"ln.mean", s.read_f32(mean, rows)},   {"ln.rstd", s.read_f32(rstd, rows)},
                   {"ln.dgamma", s.read_f32(dg, h)},      {"ln.dbeta", s.read_f32(db, h)},
                   {"rms.y", s.read_act(y2, rows * h)},   {"rms.dx", s.read_act(dx2, rows * h)},
                   {"rms.rstd", s.read_f32(rstd2, rows)}, {"rms.dgamma", s.read_f32(dg2, h)}};
  });
}

TEST_F(CudaOps, Activations) {
  const std::int64_t rows = 9, cols = 70;
  const Vec x = random_vec(rows * 2 * cols, 11, -3, 3), bias = random_vec(2 * cols, 12),
            dy = random_vec(rows * cols, 13);
  same_on_both([&](Side& s) {
    void *X = s.act(x), *Bs = s.act(bias), *DY = s.act(dy);
    void *g = s.act(rows * cols), *dg = s.act(rows * cols), *w = s.act(rows * cols), *dw = s.act(rows * 2 * cols);
    s.ops->gelu_forward(rows, cols, X, Bs, g);
    s.ops->gelu_backward(rows, cols, X, Bs, DY, dg);
    s.ops->swiglu_forward(rows, cols, X, Bs, w);
    s.ops->swiglu_backward(rows, cols, X, Bs, DY, dw);
    return Outputs{{"gelu", s.read_act(g, rows * cols)},
                   {"gelu.dx", s.read_act(dg, rows * cols)},
                   {"swiglu", s.read_act(w, rows * cols)},
                   {"swiglu.dx", s.read_act(dw, rows * 2 * cols)}};
  });
}

TEST_F(CudaOps, DropoutMasksAreTheSameBitsOnBothBackends) {
  const std::int64_t rows = 33, h = 65;
  const Vec x = random_vec(rows * h, 14), bias = random_vec(h, 15), res = random_vec(rows * h, 16);
  same_on_both([&](Side& s) {
    void *X = s.act(x), *y = s.act(rows * h), *dx = s.act(rows * h), *out = s.act(rows * h), *dy = s.act(rows * h);
    std::uint8_t *m1 = s.bytes(rows * h), *m2 = s.bytes(rows * h);
    float* dbias = s.f32(h);
    s.ops->dropout_forward(rows, h, X, y, m1, 0.3f, 42);
    s.ops->dropout_backward(rows, h, X, m1, 0.3f, dx);
    s.ops->bias_dropout_add_forward(rows, h, X, s.act(bias), s.act(res), out, m2, 0.1f, 7);
    s.ops->bias_dropout_add_backward(rows, h, X, m2, 0.1f, dy, dbias);
    Vec mask(rows * h);
    std::vector<std::uint8_t> raw(rows * h);
    s.device->synchronize(s.device->compute_stream());
    s.of.at(m1)->download(raw.data(), raw.size());
    for (std::size_t i = 0; i < raw.size(); ++i) mask[i] = raw[i];
    return Outputs{{"mask", mask},
                   {"dropout", s.read_act(y, rows * h)},
                   {"dropout.dx", s.read_act(dx, rows * h)},
                   {"bda", s.read_act(out, rows * h)},
                   {"bda.dy", s.read_act(dy, rows * h)},
                   {"bda.dbias", s.read_f32(dbias, h)}};
  });
}

TEST_F(CudaOps, SoftmaxAndRope) {
  const std::int64_t batch = 3, sq = 12, sk = 20, tokens = 11, heads = 3, d = 16;
  const Vec sc = random_vec(batch * sq * sk, 17, -4, 4), dp = random_vec(batch * sq * sk, 18),
            x = random_vec(tokens * heads * d, 19);
  same_on_both([&](Side& s) {
    void* S = s.act(sc);
    s.ops->scale_mask_softmax_forward(batch, sq, sk, sk - sq, 0, false, 0.5f, S);
    void* W = s.act(sc);  // a sliding window of 5 keys, and a sink
    s.ops->scale_mask_softmax_forward(batch, sq, sk, sk - sq, 5, true, 0.5f, W);
    void* DP = s.act(dp);
    s.ops->scale_mask_softmax_backward(batch, sq, sk, 0.5f, S, DP);
    float* table = s.f32(tokens * d);
    s.ops->rope_table(tokens, d, 5, 10000.0f, table);
    void *X = s.act(x), *X2 = s.act(x);
    s.ops->rope_forward(tokens, heads, d, table, X);
    s.ops->rope_backward(tokens, heads, d, table, X2);
    return Outputs{
        {"softmax", s.read_act(S, batch * sq * sk)},     {"softmax (window, sink)", s.read_act(W, batch * sq * sk)},
        {"softmax.dx", s.read_act(DP, batch * sq * sk)}, {"rope.table", s.read_f32(table, tokens * d)},
        {"rope", s.read_act(X, tokens * heads * d)},     {"rope.back", s.read_act(X2, tokens * heads * d)}};
  });
}

// Grouped-query heads (4 over 2, 2 over 1), fewer queries than keys (the last 24 of 40, 40 of
// 72), head dims that do not fill a warp's lanes evenly (40), that need two or four columns per
// lane (64, 128) and more than 48 KB of shared memory (256); several 32-row chunks (100 × 100);
// multi-head latent attention's query-key heads of 192 over values of 128 (DeepSeek-V3's), and
// values wider than the query-key heads.
TEST_F(CudaOps, AttentionFlashAndUnfused) {
  for (const AttentionShape a :
       {AttentionShape{2, 4, 2, 24, 40, 40}, AttentionShape{2, 4, 2, 24, 40, 64},
        AttentionShape{1, 4, 2, 100, 100, 128}, AttentionShape{1, 2, 1, 40, 72, 256},
        AttentionShape{1, 4, 4, 64, 96, 192, 128}, AttentionShape{1, 2, 2, 33, 33, 40, 72},
        AttentionShape{1, 4, 2, 100, 100, 128, 0, 37, true}, AttentionShape{2, 4, 2, 24, 40, 64, 0, 5}}) {
    const std::int64_t d = a.d, dvd = a.v_dim();
    const std::size_t nq = a.b * a.sq * a.heads * d, nk = a.b * a.sk * a.kv_heads * d,
                      nv = a.b * a.sk * a.kv_heads * dvd, no = a.b * a.sq * a.heads * dvd,
                      ns = a.b * a.heads * a.sq * a.sk;
    const Vec q = random_vec(nq, 20), k = random_vec(nk, 21), v = random_vec(nv, 22), dout = random_vec(no, 23);
    same_on_both([&](Side& s) {
      void *Q = s.act(q), *K = s.act(k), *V = s.act(v), *DO = s.act(dout);
      void *o = s.act(no), *dq = s.act(nq), *dk = s.act(nk), *dv = s.act(nv);
      float* lse = s.f32(a.b * a.heads * a.sq);
      s.ops->attention_flash_forward(a, Q, K, V, o, lse);
      s.ops->attention_flash_backward(a, Q, K, V, o, DO, lse, dq, dk, dv);
      void *uo = s.act(no), *scores = s.act(ns), *scratch = s.act(ns), *udq = s.act(nq), *udk = s.act(nk),
           *udv = s.act(nv);
      s.ops->attention_unfused_forward(a, Q, K, V, scores, uo);
      s.ops->attention_unfused_backward(a, Q, K, V, scores, DO, scratch, udq, udk, udv);
      return Outputs{{"flash.o", s.read_act(o, no)},      {"flash.lse", s.read_f32(lse, a.b * a.heads * a.sq)},
                     {"flash.dq", s.read_act(dq, nq)},    {"flash.dk", s.read_act(dk, nk)},
                     {"flash.dv", s.read_act(dv, nv)},    {"unfused.o", s.read_act(uo, no)},
                     {"unfused.dq", s.read_act(udq, nq)}, {"unfused.dk", s.read_act(udk, nk)},
                     {"unfused.dv", s.read_act(udv, nv)}};
    });
  }
}

TEST_F(CudaOps, CrossEntropyAndEmbedding) {
  const std::int64_t rows = 6, vocab = 1000, tokens = 8, h = 24;
  const Vec logits = random_vec(rows * vocab, 24, -5, 5), table = random_vec(tokens * h, 25),
            pos = random_vec(tokens * h, 26), dy = random_vec(tokens * h, 27);
  const std::vector<std::int32_t> targets = {0, 999, 17, 500, 3, 3}, ids = {1, 3, 3, 0, 7, 2, 1, 1};
  same_on_both([&](Side& s) {
    void *L = s.act(logits), *dl = s.act(rows * vocab), *out = s.act(tokens * h);
    float *loss = s.f32(rows), *mx = s.f32(rows), *sum = s.f32(rows), *dt = s.f32(tokens * h), *dp = s.f32(tokens * h);
    std::int32_t *T = s.ints(targets), *I = s.ints(ids);
    s.ops->cross_entropy_forward(rows, vocab, L, T, loss, mx, sum);
    s.ops->cross_entropy_backward(rows, vocab, L, T, mx, sum, dl);
    s.ops->embedding_forward(tokens, h, I, s.act(table), s.act(pos), out);
    s.ops->embedding_backward(tokens, h, I, s.act(dy), dt, dp);
    return Outputs{{"ce.loss", s.read_f32(loss, rows)},
                   {"ce.dlogits", s.read_act(dl, rows * vocab)},
                   {"emb", s.read_act(out, tokens * h)},
                   {"emb.dtable", s.read_f32(dt, tokens * h)},
                   {"emb.dpos", s.read_f32(dp, tokens * h)}};
  });
}

TEST_F(CudaOps, RouterPermuteUnpermute) {
  const std::int64_t tokens = 50, experts = 8, k = 2, h = 20;
  const Vec x = random_vec(tokens * h, 28), dprobs = random_vec(tokens * k, 29), eo = random_vec(tokens * k * h, 30),
            dout = random_vec(tokens * h, 31);
  same_on_both([&](Side& s) {
    float *logits = s.f32(tokens * experts), *probs = s.f32(tokens * k), *dl = s.f32(tokens * experts);
    std::int32_t *index = s.ints(std::vector<std::int32_t>(tokens * k)),
                 *row_of = s.ints(std::vector<std::int32_t>(tokens * k));
    s.ops->router_logits(tokens, experts, 2.0f, 9, logits);
    s.ops->router_topk_forward(tokens, experts, k, logits, probs, index);
    s.ops->router_topk_backward(tokens, experts, k, logits, s.f32(dprobs), index, dl);
    void *routed = s.act(tokens * k * h), *dx = s.act(tokens * h), *out = s.act(tokens * h),
         *deo = s.act(tokens * k * h);
    float* dpr = s.f32(tokens * k);
    void* X = s.act(x);
    s.ops->permute_forward(tokens, h, k, experts, index, X, routed, row_of);
    s.ops->permute_backward(tokens, h, k, row_of, routed, dx);
    s.ops->unpermute_forward(tokens, h, k, row_of, probs, s.act(eo), out);
    s.ops->unpermute_backward(tokens, h, k, row_of, probs, s.act(eo), s.act(dout), deo, dpr);
    const auto idx = s.read_ints(index, tokens * k), rows = s.read_ints(row_of, tokens * k);
    return Outputs{{"logits", s.read_f32(logits, tokens * experts)},
                   {"probs", s.read_f32(probs, tokens * k)},
                   {"index", Vec(idx.begin(), idx.end())},
                   {"dlogits", s.read_f32(dl, tokens * experts)},
                   {"row_of", Vec(rows.begin(), rows.end())},
                   {"routed", s.read_act(routed, tokens * k * h)},
                   {"permute.dx", s.read_act(dx, tokens * h)},
                   {"unpermute", s.read_act(out, tokens * h)},
                   {"unpermute.dexpert", s.read_act(deo, tokens * k * h)},
                   {"unpermute.dprobs", s.read_f32(dpr, tokens * k)}};
  });
}

TEST_F(CudaOps, AdamAndCopy) {
  const std::int64_t n = 1000;
  const Vec p = random_vec(n, 32), g = random_vec(n, 33), m = random_vec(n, 34), v = random_vec(n, 35, 0, 1);
  same_on_both(
      [&](Side& s) {
        float *P = s.f32(p), *M = s.f32(m), *V = s.f32(v);
        s.ops->adam(n, P, s.f32(g), M, V, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
        void* dst = s.act(n);
        s.ops->copy(n, s.act(p), dst);
        return Outputs{{"param", s.read_f32(P, n)},
                       {"m", s.read_f32(M, n)},
                       {"v", s.read_f32(V, n)},
                       {"copy", s.read_act(dst, n)}};
      },
      1e-5);
}

// ---- the interface on every machine -------------------------------------------------------

TEST(Ops, GroupedLinearIsOneGemmPerGroupOnTheCpu) {
  Side s(Backend::cpu);
  const std::vector<std::int64_t> rows = {3, 0, 4};
  const std::int64_t n = 5, k = 6;
  const Vec x = random_vec(7 * k, 40), w = random_vec(3 * k * n, 41);
  void *X = s.act(x), *W = s.act(w), *Y = s.act(7 * n), *ref = s.act(7 * n);
  const auto t = s.ops->grouped_linear_forward(rows, n, k, X, W, Y);
  auto* xf = static_cast<float*>(X);
  auto* wf = static_cast<float*>(W);
  auto* rf = static_cast<float*>(ref);
  s.ops->linear_forward(3, n, k, xf, wf, rf);
  s.ops->linear_forward(4, n, k, xf + 3 * k, wf + 2 * k * n, rf + 3 * n);
  EXPECT_EQ(s.read_act(Y, 7 * n), s.read_act(ref, 7 * n));
  EXPECT_DOUBLE_EQ(t.read, 4.0 * (7 * k + 2 * k * n));  // the empty group reads nothing
  Vec dw = random_vec(3 * k * n, 42);
  void* DW = s.act(dw);
  s.ops->grouped_linear_backward_weight(rows, n, k, X, Y, DW);
  const Vec got = s.read_act(DW, 3 * k * n);
  for (std::int64_t i = k * n; i < 2 * k * n; ++i) EXPECT_EQ(got[i], 0.0f) << "the empty group's gradient";
}

TEST(Ops, CudaWithoutADeviceIsARefusalWithAReason) {
  const auto d = sax::kernels::cuda_devices();
  if (d.count > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(sax::kernels::make_device(Backend::cuda), std::exception);
}
