// The CPU attention ops: unfused (scores materialised, through cblas) and flash (blocked, online
// softmax), forward and backward, with grouped-query heads.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/float_math.hpp"
#include "kernels/cpu/ops.hpp"

namespace sax::kernels::cpu {

namespace {
struct Strides {
  std::int64_t q_row, kv_row, o_row, v_row;  // floats between consecutive positions: Q, K, O, V
};
Strides strides(const AttentionShape& s) {
  return {s.heads * s.d, s.kv_heads * s.d, s.heads * s.v_dim(), s.kv_heads * s.v_dim()};
}
std::int64_t kv_head_of(const AttentionShape& s, std::int64_t h) { return h / (s.heads / s.kv_heads); }
// Strided GEMM through cblas: C (m×n, ldc) = op(A)·op(B).
void sgemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}
}  // namespace

Traffic attention_unfused_forward(const AttentionShape& s, const float* q, const float* k, const float* v,
                                  float* scores, float* o) {
  const Strides st = strides(s);
  const std::int64_t dv = s.v_dim();
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  for (std::int64_t b = 0; b < s.b; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::int64_t g = kv_head_of(s, h);
      float* S = scores + (b * s.heads + h) * s.sq * s.sk;
      sgemm(false, true, s.sq, s.sk, s.d, 1.0f, q + b * s.sq * st.q_row + h * s.d, st.q_row,
            k + b * s.sk * st.kv_row + g * s.d, st.kv_row, 0.0f, S, s.sk);
      scale_mask_softmax_forward(1, s.sq, s.sk, s.sk - s.sq, s.window, s.sink, scale, S);
      sgemm(false, false, s.sq, dv, s.sk, 1.0f, S, s.sk, v + b * s.sk * st.v_row + g * dv, st.v_row, 0.0f,
            o + b * s.sq * st.o_row + h * dv, st.o_row);
    }
  // Per batch and head: the scores product, the softmax pass, the values product.
  const double bh = static_cast<double>(s.b * s.heads), sc = fl(s.sq * s.sk);
  return {bh * (fl(s.sq * s.d + s.sk * s.d) + sc + sc + fl(s.sk * dv)), bh * (sc + sc + fl(s.sq * dv)),
          bh * 2.0 * static_cast<double>(s.sq * s.sk * (s.d + dv))};
}

Traffic attention_unfused_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                                   const float* probs, const float* dout, float* scratch, float* dq, float* dk,
                                   float* dv) {
  const Strides st = strides(s);
  const std::int64_t vd = s.v_dim();
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  std::fill(dk, dk + s.b * s.sk * st.kv_row, 0.0f), std::fill(dv, dv + s.b * s.sk * st.v_row, 0.0f);
  for (std::int64_t b = 0; b < s.b; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::int64_t g = kv_head_of(s, h);
      const float* P = probs + (b * s.heads + h) * s.sq * s.sk;
      const float* dO = dout + b * s.sq * st.o_row + h * vd;
      float* dP = scratch;  // sq × sk
      // dV += Pᵀ·dO; dP = dO·Vᵀ; dS = softmax'(dP) (scaled); dQ = dS·K; dK += dSᵀ·Q.
      sgemm(true, false, s.sk, vd, s.sq, 1.0f, P, s.sk, dO, st.o_row, 1.0f, dv + b * s.sk * st.v_row + g * vd,
            st.v_row);
      sgemm(false, true, s.sq, s.sk, vd, 1.0f, dO, st.o_row, v + b * s.sk * st.v_row + g * vd, st.v_row, 0.0f, dP,
            s.sk);
      scale_mask_softmax_backward(1, s.sq, s.sk, scale, P, dP);
      sgemm(false, false, s.sq, s.d, s.sk, 1.0f, dP, s.sk, k + b * s.sk * st.kv_row + g * s.d, st.kv_row, 0.0f,
            dq + b * s.sq * st.q_row + h * s.d, st.q_row);
      sgemm(true, false, s.sk, s.d, s.sq, 1.0f, dP, s.sk, q + b * s.sq * st.q_row + h * s.d, st.q_row, 1.0f,
            dk + b * s.sk * st.kv_row + g * s.d, st.kv_row);
    }
  // The values product's backward (reads P, dO, V; writes dP, dV), the softmax's (reads P, dP;
  // writes dS), the scores product's (reads dS, Q, K; writes dQ, dK), per batch and head.
  const double bh = static_cast<double>(s.b * s.heads), sc = fl(s.sq * s.sk), qd = fl(s.sq * s.d), kd = fl(s.sk * s.d),
               od = fl(s.sq * vd), vdd = fl(s.sk * vd);
  return {bh * ((sc + 2 * od + vdd) + 2 * sc + (sc + qd + kd)), bh * ((sc + vdd) + sc + (qd + kd)),
          bh * 4.0 * static_cast<double>(s.sq * s.sk * (s.d + vd))};
}

Traffic attention_flash_forward(const AttentionShape& s, const float* q, const float* k, const float* v, float* o,
                                float* lse) {
  const Strides st = strides(s);
  const std::int64_t dv = s.v_dim();
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  constexpr std::int64_t kBq = 64, kBk = 64;
  std::vector<float> S(z(kBq * kBk)), acc(z(kBq * dv)), m(z(kBq)), l(z(kBq));
  double executed = 0;
  for (std::int64_t b = 0; b < s.b; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::int64_t g = kv_head_of(s, h);
      const float* K = k + b * s.sk * st.kv_row + g * s.d;
      const float* V = v + b * s.sk * st.v_row + g * dv;
      for (std::int64_t i0 = 0; i0 < s.sq; i0 += kBq) {
        const std::int64_t bq = std::min(kBq, s.sq - i0);
        const float* Q = q + (b * s.sq + i0) * st.q_row + h * s.d;
        std::fill(acc.begin(), acc.end(), 0.0f);
        // A sink starts each row as a key of logit 0 that brings no value.
        std::fill(m.begin(), m.end(), s.sink ? 0.0f : kNoMax);
        std::fill(l.begin(), l.end(), s.sink ? 1.0f : 0.0f);
        // Causal (and windowed): the blocks before the first query's window and past the last
        // query skipped.
        const std::int64_t keys = s.key_end(i0 + bq - 1);
        for (std::int64_t j0 = s.key_begin(i0); j0 < keys; j0 += kBk) {
          const std::int64_t bk = std::min(kBk, keys - j0);
          sgemm(false, true, bq, bk, s.d, scale, Q, st.q_row, K + j0 * st.kv_row, st.kv_row, 0.0f, S.data(), bk);
          executed += 2.0 * static_cast<double>(bq * bk * (s.d + dv));  // this product and the values one
          for (std::int64_t i = 0; i < bq; ++i) {
            float* row = S.data() + i * bk;
            const std::int64_t lo = std::clamp<std::int64_t>(s.key_begin(i0 + i) - j0, 0, bk),
                               hi = std::clamp<std::int64_t>(s.key_end(i0 + i) - j0, 0, bk);
            float mx = m[i];
            for (std::int64_t j = lo; j < hi; ++j) mx = std::max(mx, row[j]);
            const float corr = fast_exp(m[i] - mx);
            float sum = 0;
            for (std::int64_t j = 0; j < bk; ++j) {
              row[j] = j >= lo && j < hi ? fast_exp(row[j] - mx) : 0.0f;
              sum += row[j];
            }
            l[i] = l[i] * corr + sum;
            for (std::int64_t c = 0; c < dv; ++c) acc[i * dv + c] *= corr;
            m[i] = mx;
          }
          sgemm(false, false, bq, dv, bk, 1.0f, S.data(), bk, V + j0 * st.v_row, st.v_row, 1.0f, acc.data(), dv);
        }
        for (std::int64_t i = 0; i < bq; ++i) {
          float* out = o + (b * s.sq + i0 + i) * st.o_row + h * dv;
          for (std::int64_t c = 0; c < dv; ++c) out[c] = acc[i * dv + c] / l[i];
          lse[(b * s.heads + h) * s.sq + i0 + i] = m[i] + std::log(l[i]);
        }
      }
    }
  // Q, K, V read and O, the log-sum-exp written, each element once (the blocks stay on chip).
  const double qb = fl(s.b * s.sq * s.heads * s.d), kb = fl(s.b * s.sk * s.kv_heads * s.d),
               vb = fl(s.b * s.sk * s.kv_heads * dv), ob = fl(s.b * s.sq * s.heads * dv), lb = fl(s.b * s.heads * s.sq);
  return {qb + kb + vb, ob + lb, executed};
}

Traffic attention_flash_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                                 const float* o, const float* dout, const float* lse, float* dq, float* dk, float* dv) {
  const Strides st = strides(s);
  const std::int64_t vd = s.v_dim();
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  constexpr std::int64_t kBq = 64, kBk = 64;
  std::vector<float> P(z(kBq * kBk)), dP(z(kBq * kBk)), D(z(kBq));
  double executed = 0;
  std::fill(dq, dq + s.b * s.sq * st.q_row, 0.0f);
  std::fill(dk, dk + s.b * s.sk * st.kv_row, 0.0f), std::fill(dv, dv + s.b * s.sk * st.v_row, 0.0f);
  for (std::int64_t b = 0; b < s.b; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::int64_t g = kv_head_of(s, h);
      const float* K = k + b * s.sk * st.kv_row + g * s.d;
      const float* V = v + b * s.sk * st.v_row + g * vd;
      float* dK = dk + b * s.sk * st.kv_row + g * s.d;
      float* dV = dv + b * s.sk * st.v_row + g * vd;
      for (std::int64_t i0 = 0; i0 < s.sq; i0 += kBq) {
        const std::int64_t bq = std::min(kBq, s.sq - i0);
        const std::int64_t row0 = (b * s.sq + i0) * st.q_row + h * s.d, orow0 = (b * s.sq + i0) * st.o_row + h * vd;
        const float *Q = q + row0, *O = o + orow0, *dO = dout + orow0;
        float* dQ = dq + row0;
        const float* L = lse + (b * s.heads + h) * s.sq + i0;
        for (std::int64_t i = 0; i < bq; ++i) {  // D = rowsum(dO ∘ O)
          double dot = 0;
          for (std::int64_t c = 0; c < vd; ++c) dot += static_cast<double>(dO[i * st.o_row + c]) * O[i * st.o_row + c];
          D[i] = static_cast<float>(dot);
        }
        // The probabilities again from the log-sum-exp (a sink's share is in it).
        const std::int64_t keys = s.key_end(i0 + bq - 1);
        for (std::int64_t j0 = s.key_begin(i0); j0 < keys; j0 += kBk) {
          const std::int64_t bk = std::min(kBk, keys - j0);
          sgemm(false, true, bq, bk, s.d, scale, Q, st.q_row, K + j0 * st.kv_row, st.kv_row, 0.0f, P.data(), bk);
          executed += 2.0 * static_cast<double>(bq * bk * (3 * s.d + 2 * vd));  // S again, dV, dP, dQ, dK
          for (std::int64_t i = 0; i < bq; ++i) {
            const std::int64_t lo = s.key_begin(i0 + i) - j0, hi = s.key_end(i0 + i) - j0;
            for (std::int64_t j = 0; j < bk; ++j)
              P[i * bk + j] = j >= lo && j < hi ? fast_exp(P[i * bk + j] - L[i]) : 0.0f;
          }
          // dV += Pᵀ·dO; dP = dO·Vᵀ; dS = P ∘ (dP − D); dQ += scale·dS·K; dK += scale·dSᵀ·Q.
          sgemm(true, false, bk, vd, bq, 1.0f, P.data(), bk, dO, st.o_row, 1.0f, dV + j0 * st.v_row, st.v_row);
          sgemm(false, true, bq, bk, vd, 1.0f, dO, st.o_row, V + j0 * st.v_row, st.v_row, 0.0f, dP.data(), bk);
          for (std::int64_t i = 0; i < bq; ++i)
            for (std::int64_t j = 0; j < bk; ++j) dP[i * bk + j] = P[i * bk + j] * (dP[i * bk + j] - D[i]);
          sgemm(false, false, bq, s.d, bk, scale, dP.data(), bk, K + j0 * st.kv_row, st.kv_row, 1.0f, dQ, st.q_row);
          sgemm(true, false, bk, s.d, bq, scale, dP.data(), bk, Q, st.q_row, 1.0f, dK + j0 * st.kv_row, st.kv_row);
        }
      }
    }
  // Reads Q, K, V, O, dO and the log-sum-exp; writes dQ, dK, dV.
  const double qb = fl(s.b * s.sq * s.heads * s.d), kb = fl(s.b * s.sk * s.kv_heads * s.d),
               vb = fl(s.b * s.sk * s.kv_heads * vd), ob = fl(s.b * s.sq * s.heads * vd), lb = fl(s.b * s.heads * s.sq);
  return {qb + kb + vb + 2 * ob + lb, qb + kb + vb, executed};
}

}  // namespace sax::kernels::cpu
