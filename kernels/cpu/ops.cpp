#include "kernels/cpu/ops.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/cpu/float_math.hpp"
#include "kernels/random.hpp"

// The memory-bound ops are built twice on x86-64: for AVX2 (8 floats a vector) and for the
// baseline, chosen when the program starts by what the processor has (GCC's function
// multiversioning); elsewhere once.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SAX_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SAX_VECTOR_CLONES
#endif

// OpenBLAS's thread control, where the CBLAS linked is OpenBLAS (weak: absent elsewhere).
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace sax::kernels::cpu {

bool set_blas_threads(int threads) {
  if (!openblas_set_num_threads) return false;
  openblas_set_num_threads(threads);
  return true;
}

namespace {

// Dropout's keep decisions for elements [first, first + n) (kernels/random.hpp).
inline void keep_mask(std::uint64_t seed, std::uint64_t first, std::int64_t n, float p, std::uint8_t* mask) {
  const DropoutHash hash(seed, p);
  for (std::int64_t i = 0; i < n; ++i) mask[i] = hash.keep(first + static_cast<std::uint64_t>(i)) ? 1 : 0;
}

inline float fast_tanh(float u) { return 1.0f - 2.0f / (fast_exp(2.0f * u) + 1.0f); }
inline float fast_sigmoid(float g) { return 1.0f / (1.0f + fast_exp(-g)); }

// Σ x[j] and Σ x[j]·y[j] over eight independent lanes (so that the loop vectorises).
inline float lane_sum(const float* x, std::int64_t n) {
  float acc[8] = {};
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) acc[l] += x[j + l];
  float s = 0;
  for (; j < n; ++j) s += x[j];
  for (float a : acc) s += a;
  return s;
}
inline float lane_dot(const float* x, const float* y, std::int64_t n) {
  float acc[8] = {};
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) acc[l] += x[j + l] * y[j + l];
  float s = 0;
  for (; j < n; ++j) s += x[j] * y[j];
  for (float a : acc) s += a;
  return s;
}

}  // namespace

Traffic gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a, const float* b, float* c,
             bool accumulate) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(ta ? m : k), b,
              static_cast<int>(tb ? k : n), accumulate ? 1.0f : 0.0f, c, static_cast<int>(n));
  return {fl(m * k + k * n + (accumulate ? m * n : 0)), fl(m * n), 2.0 * static_cast<double>(m * n * k)};
}

Traffic linear_forward(std::int64_t m, std::int64_t n, std::int64_t k, const float* x, const float* w, float* y) {
  return gemm(false, false, m, n, k, x, w, y);
}
Traffic linear_backward_input(std::int64_t m, std::int64_t n, std::int64_t k, const float* dy, const float* w,
                              float* dx) {
  return gemm(false, true, m, k, n, dy, w, dx);
}
Traffic linear_backward_weight(std::int64_t m, std::int64_t n, std::int64_t k, const float* x, const float* dy,
                               float* dw) {
  return gemm(true, false, k, n, m, x, dy, dw);
}

SAX_VECTOR_CLONES Traffic layer_norm_forward(std::int64_t rows, std::int64_t h, const float* x, const float* gamma,
                                             const float* beta, float* y, float* mean, float* rstd, float eps) {
  std::vector<float> centred(z(h));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * h;
    const float mu = lane_sum(xr, h) / static_cast<float>(h);
    for (std::int64_t j = 0; j < h; ++j) centred[z(j)] = xr[j] - mu;
    const float rs = 1.0f / std::sqrt(lane_dot(centred.data(), centred.data(), h) / static_cast<float>(h) + eps);
    mean[r] = mu, rstd[r] = rs;
    float* yr = y + r * h;
    for (std::int64_t j = 0; j < h; ++j) yr[j] = centred[z(j)] * rs * gamma[j] + beta[j];
  }
  return {fl(rows * h + 2 * h), fl(rows * h + 2 * rows)};
}

SAX_VECTOR_CLONES Traffic layer_norm_backward(std::int64_t rows, std::int64_t h, const float* x, const float* dy,
                                              const float* gamma, const float* mean, const float* rstd, float* dx,
                                              float* dgamma, float* dbeta) {
  std::fill(dgamma, dgamma + h, 0.0f), std::fill(dbeta, dbeta + h, 0.0f);
  std::vector<float> xhat(z(h)), g(z(h));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * h, *dyr = dy + r * h;
    const float mu = mean[r], rs = rstd[r];
    for (std::int64_t j = 0; j < h; ++j) {
      xhat[z(j)] = (xr[j] - mu) * rs;
      g[z(j)] = dyr[j] * gamma[j];
      dgamma[j] += dyr[j] * xhat[z(j)];
      dbeta[j] += dyr[j];
    }
    const float a = lane_sum(g.data(), h) / static_cast<float>(h),
                b = lane_dot(g.data(), xhat.data(), h) / static_cast<float>(h);
    float* dxr = dx + r * h;
    for (std::int64_t j = 0; j < h; ++j) dxr[j] = rs * (g[z(j)] - a - xhat[z(j)] * b);
  }
  return {fl(2 * rows * h + h + 2 * rows), fl(rows * h + 2 * h)};
}

SAX_VECTOR_CLONES Traffic rms_norm_forward(std::int64_t rows, std::int64_t h, const float* x, const float* gamma,
                                           float* y, float* rstd, float eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * h;
    const float rs = 1.0f / std::sqrt(lane_dot(xr, xr, h) / static_cast<float>(h) + eps);
    rstd[r] = rs;
    float* yr = y + r * h;
    for (std::int64_t j = 0; j < h; ++j) yr[j] = xr[j] * rs * gamma[j];
  }
  return {fl(rows * h + h), fl(rows * h + rows)};
}

SAX_VECTOR_CLONES Traffic rms_norm_backward(std::int64_t rows, std::int64_t h, const float* x, const float* dy,
                                            const float* gamma, const float* rstd, float* dx, float* dgamma) {
  std::fill(dgamma, dgamma + h, 0.0f);
  std::vector<float> g(z(h));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * h, *dyr = dy + r * h;
    const float rs = rstd[r];
    for (std::int64_t j = 0; j < h; ++j) {
      g[z(j)] = dyr[j] * gamma[j];
      dgamma[j] += dyr[j] * xr[j] * rs;
    }
    const float b = lane_dot(g.data(), xr, h) * rs / static_cast<float>(h);
    float* dxr = dx + r * h;
    for (std::int64_t j = 0; j < h; ++j) dxr[j] = rs * (g[z(j)] - xr[j] * rs * b);
  }
  return {fl(2 * rows * h + h + rows), fl(rows * h + h)};
}

namespace {
constexpr float kGeluC = 0.7978845608f;  // sqrt(2/pi)
}  // namespace

// A bias of zeros where there is none, so that the loops have no branch (and vectorise).
const float* bias_or_zeros(const float* bias, std::int64_t n, std::vector<float>& zeros) {
  if (bias) return bias;
  zeros.assign(z(n), 0.0f);
  return zeros.data();
}

SAX_VECTOR_CLONES Traffic gelu_forward(std::int64_t rows, std::int64_t cols, const float* x, const float* bias_in,
                                       float* y) {
  std::vector<float> zeros;
  const float* bias = bias_or_zeros(bias_in, cols, zeros);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    for (std::int64_t j = 0; j < cols; ++j) {
      const float v = xr[j] + bias[j];
      // ½v(1 + tanh z) = v·σ(2z): one exp and one division.
      yr[j] = v / (1.0f + fast_exp(-2.0f * kGeluC * (v + 0.044715f * v * v * v)));
    }
  }
  return {fl(rows * cols + (bias_in ? cols : 0)), fl(rows * cols)};
}

SAX_VECTOR_CLONES Traffic gelu_backward(std::int64_t rows, std::int64_t cols, const float* x, const float* bias_in,
                                        const float* dy, float* dx) {
  std::vector<float> zeros;
  const float* bias = bias_or_zeros(bias_in, cols, zeros);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * cols, *dyr = dy + r * cols;
    float* dxr = dx + r * cols;
    for (std::int64_t j = 0; j < cols; ++j) {
      const float v = xr[j] + bias[j];
      const float t = fast_tanh(kGeluC * (v + 0.044715f * v * v * v));
      dxr[j] = dyr[j] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * 0.044715f * v * v));
    }
  }
  return {fl(2 * rows * cols + (bias_in ? cols : 0)), fl(rows * cols)};
}

SAX_VECTOR_CLONES Traffic swiglu_forward(std::int64_t rows, std::int64_t cols, const float* x, const float* bias_in,
                                         float* y) {
  std::vector<float> zeros;
  const float* bias = bias_or_zeros(bias_in, 2 * cols, zeros);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float *gate = x + r * 2 * cols, *up = gate + cols;
    float* yr = y + r * cols;
    for (std::int64_t j = 0; j < cols; ++j) {
      const float g = gate[j] + bias[j], u = up[j] + bias[cols + j];
      yr[j] = g * u / (1.0f + fast_exp(-g));
    }
  }
  return {fl(2 * rows * cols + (bias_in ? 2 * cols : 0)), fl(rows * cols)};
}

namespace {
inline void swiglu_backward_row(std::int64_t cols, const float* __restrict gate, const float* __restrict up,
                                const float* __restrict bias_gate, const float* __restrict bias_up,
                                const float* __restrict dy, float* __restrict dgate, float* __restrict dup) {
  for (std::int64_t j = 0; j < cols; ++j) {
    const float g = gate[j] + bias_gate[j], u = up[j] + bias_up[j];
    const float sig = fast_sigmoid(g), d = dy[j];
    dgate[j] = d * u * sig * (1.0f + g * (1.0f - sig));
    dup[j] = d * g * sig;
  }
}
}  // namespace

SAX_VECTOR_CLONES Traffic swiglu_backward(std::int64_t rows, std::int64_t cols, const float* x, const float* bias_in,
                                          const float* dy, float* dx) {
  std::vector<float> zeros;
  const float* bias = bias_or_zeros(bias_in, 2 * cols, zeros);
  // Seven streams are more pairs than GCC checks for overlap at run time: the row is a function
  // of restrict pointers, which lets the loop vectorise.
  for (std::int64_t r = 0; r < rows; ++r)
    swiglu_backward_row(cols, x + r * 2 * cols, x + r * 2 * cols + cols, bias, bias + cols, dy + r * cols,
                        dx + r * 2 * cols, dx + r * 2 * cols + cols);
  return {fl(3 * rows * cols + (bias_in ? 2 * cols : 0)), fl(2 * rows * cols)};
}

SAX_VECTOR_CLONES Traffic dropout_forward(std::int64_t rows, std::int64_t cols, const float* x, float* y,
                                          std::uint8_t* mask, float p, std::uint64_t seed) {
  const float keep = 1.0f / (1.0f - p);
  const std::int64_t n = rows * cols;
  keep_mask(seed, 0, n, p, mask);
  for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * (static_cast<float>(mask[i]) * keep);  // branch-free
  return {fl(n), fl(n) + static_cast<double>(n)};
}

SAX_VECTOR_CLONES Traffic dropout_backward(std::int64_t rows, std::int64_t cols, const float* dy,
                                           const std::uint8_t* mask, float p, float* dx) {
  const float keep = 1.0f / (1.0f - p);
  for (std::int64_t i = 0; i < rows * cols; ++i) dx[i] = dy[i] * (static_cast<float>(mask[i]) * keep);
  return {fl(rows * cols) + static_cast<double>(rows * cols), fl(rows * cols)};
}

SAX_VECTOR_CLONES Traffic bias_dropout_add_forward(std::int64_t rows, std::int64_t h, const float* y, const float* bias,
                                                   const float* residual, float* out, std::uint8_t* mask, float p,
                                                   std::uint64_t seed) {
  const float keep = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
  const std::int64_t total = rows * h;
  std::vector<float> zeros;
  const float* b = bias_or_zeros(bias, h, zeros);
  if (p > 0) keep_mask(seed, 0, total, p, mask);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float *yr = y + r * h, *res = residual + r * h;
    float* o = out + r * h;
    const std::uint8_t* mr = p > 0 ? mask + r * h : nullptr;
    if (mr)
      for (std::int64_t j = 0; j < h; ++j) o[j] = res[j] + (yr[j] + b[j]) * (static_cast<float>(mr[j]) * keep);
    else
      for (std::int64_t j = 0; j < h; ++j) o[j] = res[j] + yr[j] + b[j];
  }
  const double n = static_cast<double>(rows * h);
  return {fl(2 * rows * h + (bias ? h : 0)), fl(rows * h) + (p > 0 ? n : 0)};
}

SAX_VECTOR_CLONES Traffic bias_dropout_add_backward(std::int64_t rows, std::int64_t h, const float* dout,
                                                    const std::uint8_t* mask, float p, float* dy, float* dbias) {
  const float keep = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
  if (dbias) std::fill(dbias, dbias + h, 0.0f);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < h; ++j) {
      const std::int64_t i = r * h + j;
      dy[i] = p > 0 ? dout[i] * (static_cast<float>(mask[i]) * keep) : dout[i];
      if (dbias) dbias[j] += dy[i];
    }
  const double n = static_cast<double>(rows * h);
  return {fl(rows * h) + (p > 0 ? n : 0), fl(rows * h + (dbias ? h : 0))};
}

SAX_VECTOR_CLONES Traffic scale_mask_softmax_forward(std::int64_t batch, std::int64_t sq, std::int64_t sk,
                                                     std::int64_t q_offset, std::int64_t window, bool sink, float scale,
                                                     float* s) {
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < sq; ++i) {
      float* row = s + (b * sq + i) * sk;
      const std::int64_t end = std::min(sk, q_offset + i + 1),
                         begin = window > 0 ? std::max<std::int64_t>(0, q_offset + i - window) : 0;
      float mx = kNoMax;
      for (std::int64_t j = begin; j < end; ++j) mx = std::max(mx, row[j]);
      mx *= scale;
      if (sink) mx = std::max(mx, 0.0f);  // the sink's logit is 0
      float acc[8] = {};
      std::int64_t j = begin;
      for (; j + 8 <= end; j += 8)
        for (int l = 0; l < 8; ++l) acc[l] += row[j + l] = fast_exp(row[j + l] * scale - mx);
      float sum = sink ? fast_exp(-mx) : 0.0f;
      for (; j < end; ++j) sum += row[j] = fast_exp(row[j] * scale - mx);
      for (float a : acc) sum += a;
      const float inv = 1.0f / sum;
      for (j = 0; j < begin; ++j) row[j] = 0.0f;
      for (; j < end; ++j) row[j] *= inv;
      for (; j < sk; ++j) row[j] = 0.0f;
    }
  return {fl(batch * sq * sk), fl(batch * sq * sk)};
}

SAX_VECTOR_CLONES Traffic scale_mask_softmax_backward(std::int64_t batch, std::int64_t sq, std::int64_t sk, float scale,
                                                      const float* p, float* dp) {
  for (std::int64_t r = 0; r < batch * sq; ++r) {
    const float* pr = p + r * sk;
    float* dr = dp + r * sk;
    const float dot = lane_dot(pr, dr, sk);
    for (std::int64_t j = 0; j < sk; ++j) dr[j] = scale * pr[j] * (dr[j] - dot);
  }
  return {fl(2 * batch * sq * sk), fl(batch * sq * sk)};
}

Traffic rope_table(std::int64_t tokens, std::int64_t d, std::int64_t first_position, float base, float* table) {
  const std::int64_t half = d / 2;
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(first_position + t) * std::pow(base, -2.0 * i / static_cast<double>(d));
      table[t * d + i] = static_cast<float>(std::cos(angle));
      table[t * d + half + i] = static_cast<float>(std::sin(angle));
    }
  return {0, fl(tokens * d)};
}

namespace {
Traffic rotate(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table, float* x, float sign) {
  const std::int64_t half = d / 2;
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t hd = 0; hd < heads; ++hd) {
      float* v = x + (t * heads + hd) * d;
      for (std::int64_t i = 0; i < half; ++i) {
        const float c = table[t * d + i], s = sign * table[t * d + half + i], a = v[i], b = v[half + i];
        v[i] = a * c - b * s;
        v[half + i] = b * c + a * s;
      }
    }
  return {fl(tokens * heads * d + tokens * d), fl(tokens * heads * d)};
}
}  // namespace

Traffic rope_forward(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table, float* x) {
  return rotate(tokens, heads, d, table, x, 1.0f);
}
Traffic rope_backward(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table, float* dx) {
  return rotate(tokens, heads, d, table, dx, -1.0f);  // the inverse rotation
}

// ---- output, embedding, router, optimizer ---------------------------------------------------

SAX_VECTOR_CLONES Traffic cross_entropy_forward(std::int64_t rows, std::int64_t vocab, const float* logits,
                                                const std::int32_t* targets, float* loss, float* row_max,
                                                float* row_sum) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* lg = logits + r * vocab;
    // Max and Σ exp over eight lanes, written out here so that each clone vectorises them.
    float lm[8] = {kNoMax, kNoMax, kNoMax, kNoMax, kNoMax, kNoMax, kNoMax, kNoMax}, ls[8] = {};
    std::int64_t j = 0;
    for (; j + 8 <= vocab; j += 8)
      for (int l = 0; l < 8; ++l) lm[l] = std::max(lm[l], lg[j + l]);
    float mx = kNoMax;
    for (; j < vocab; ++j) mx = std::max(mx, lg[j]);
    for (float m : lm) mx = std::max(mx, m);
    for (j = 0; j + 8 <= vocab; j += 8)
      for (int l = 0; l < 8; ++l) ls[l] += fast_exp(lg[j + l] - mx);
    float sum = 0;
    for (; j < vocab; ++j) sum += fast_exp(lg[j] - mx);
    for (float v : ls) sum += v;
    row_max[r] = mx, row_sum[r] = sum;
    loss[r] = std::log(sum) + mx - lg[targets[r]];
  }
  return {fl(rows * vocab + rows), fl(3 * rows)};
}

SAX_VECTOR_CLONES Traffic cross_entropy_backward(std::int64_t rows, std::int64_t vocab, const float* logits,
                                                 const std::int32_t* targets, const float* row_max,
                                                 const float* row_sum, float* dlogits) {
  const float inv_rows = 1.0f / static_cast<float>(rows);  // of the mean loss
  for (std::int64_t r = 0; r < rows; ++r) {
    const float *lg = logits + r * vocab, mx = row_max[r], scale = inv_rows / row_sum[r];
    float* d = dlogits + r * vocab;
    for (std::int64_t j = 0; j < vocab; ++j) d[j] = fast_exp(lg[j] - mx) * scale;
    d[targets[r]] -= inv_rows;
  }
  return {fl(rows * vocab + 3 * rows), fl(rows * vocab)};
}

Traffic embedding_forward(std::int64_t tokens, std::int64_t h, const std::int32_t* ids, const float* table,
                          const float* positions, float* out) {
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t j = 0; j < h; ++j)
      out[t * h + j] = table[static_cast<std::int64_t>(ids[t]) * h + j] + (positions ? positions[t * h + j] : 0.0f);
  const double pos = positions ? 1 : 0;
  return {fl(tokens) + (1 + pos) * fl(tokens * h), fl(tokens * h)};
}

Traffic embedding_backward(std::int64_t tokens, std::int64_t h, const std::int32_t* ids, const float* dy, float* dtable,
                           float* dpositions) {
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t j = 0; j < h; ++j) {
      dtable[static_cast<std::int64_t>(ids[t]) * h + j] += dy[t * h + j];
      if (dpositions) dpositions[t * h + j] += dy[t * h + j];
    }
  const double grads = (dpositions ? 2 : 1) * fl(tokens * h);
  return {fl(tokens * h + tokens) + grads, grads};
}

Traffic router_topk_forward(std::int64_t tokens, std::int64_t experts, std::int64_t k, const float* logits,
                            float* probs, std::int32_t* index) {
  std::vector<double> p(z(experts));
  std::vector<std::int32_t> order(z(experts));
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float* lg = logits + t * experts;
    const float mx = *std::max_element(lg, lg + experts);
    double sum = 0;
    for (std::int64_t e = 0; e < experts; ++e) sum += p[z(e)] = std::exp(static_cast<double>(lg[e] - mx));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::int32_t a, std::int32_t b) {
      return p[z(a)] > p[z(b)] || (p[z(a)] == p[z(b)] && a < b);
    });
    for (std::int64_t j = 0; j < k; ++j) {
      index[t * k + j] = order[z(j)];
      probs[t * k + j] = static_cast<float>(p[z(order[z(j)])] / sum);
    }
  }
  return {fl(tokens * experts), fl(2 * tokens * k)};
}

Traffic router_topk_backward(std::int64_t tokens, std::int64_t experts, std::int64_t k, const float* logits,
                             const float* dprobs, const std::int32_t* index, float* dlogits) {
  std::vector<double> p(z(experts)), dp(z(experts));
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float* lg = logits + t * experts;
    const float mx = *std::max_element(lg, lg + experts);
    double sum = 0;
    for (std::int64_t e = 0; e < experts; ++e) sum += p[z(e)] = std::exp(static_cast<double>(lg[e] - mx));
    std::fill(dp.begin(), dp.end(), 0.0);
    for (std::int64_t j = 0; j < k; ++j) dp[z(index[t * k + j])] += dprobs[t * k + j];
    double dot = 0;
    for (std::int64_t e = 0; e < experts; ++e) dot += (p[z(e)] /= sum) * dp[z(e)];
    for (std::int64_t e = 0; e < experts; ++e)
      dlogits[t * experts + e] = static_cast<float>(p[z(e)] * (dp[z(e)] - dot));
  }
  return {fl(tokens * experts + 2 * tokens * k), fl(tokens * experts)};
}

void router_logits(std::int64_t tokens, std::int64_t experts, float skew, std::uint64_t seed, float* logits) {
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t e = 0; e < experts; ++e)
      logits[t * experts + e] = uniform24(seed, static_cast<std::uint64_t>(t * experts + e)) -
                                skew * static_cast<float>(e) / static_cast<float>(experts);
}

Traffic permute_forward(std::int64_t tokens, std::int64_t h, std::int64_t k, std::int64_t experts,
                        const std::int32_t* index, const float* x, float* routed, std::int32_t* row_of) {
  std::vector<std::int64_t> start(z(experts + 1), 0);
  for (std::int64_t i = 0; i < tokens * k; ++i) ++start[z(index[i] + 1)];
  std::partial_sum(start.begin(), start.end(), start.begin());
  for (std::int64_t i = 0; i < tokens * k; ++i) {  // stable: tokens keep their order within an expert
    const std::int64_t row = start[z(index[i])]++;
    row_of[i] = static_cast<std::int32_t>(row);
    std::copy(x + (i / k) * h, x + (i / k + 1) * h, routed + row * h);
  }
  return {fl(tokens * k * h + tokens * k), fl(tokens * k * h + tokens * k)};
}

SAX_VECTOR_CLONES Traffic permute_backward(std::int64_t tokens, std::int64_t h, std::int64_t k,
                                           const std::int32_t* row_of, const float* drouted, float* dx) {
  // Token by token: its gradient row written once, the sum of its k copies' gradients.
  for (std::int64_t t = 0; t < tokens; ++t) {
    float* d = dx + t * h;
    for (std::int64_t c = 0; c < k; ++c) {
      const float* g = drouted + static_cast<std::int64_t>(row_of[t * k + c]) * h;
      if (c == 0)
        for (std::int64_t j = 0; j < h; ++j) d[j] = g[j];
      else
        for (std::int64_t j = 0; j < h; ++j) d[j] += g[j];
    }
  }
  return {fl(tokens * k * h + tokens * k), fl(tokens * h)};
}

SAX_VECTOR_CLONES Traffic unpermute_forward(std::int64_t tokens, std::int64_t h, std::int64_t k,
                                            const std::int32_t* row_of, const float* probs, const float* expert_out,
                                            float* out) {
  // Token by token: its row written once, the first copy's term stored and the others added.
  for (std::int64_t t = 0; t < tokens; ++t) {
    float* o = out + t * h;
    for (std::int64_t c = 0; c < k; ++c) {
      const float p = probs[t * k + c];
      const float* e = expert_out + static_cast<std::int64_t>(row_of[t * k + c]) * h;
      if (c == 0)
        for (std::int64_t j = 0; j < h; ++j) o[j] = p * e[j];
      else
        for (std::int64_t j = 0; j < h; ++j) o[j] += p * e[j];
    }
  }
  return {fl(tokens * k * h + 2 * tokens * k), fl(tokens * h)};
}

SAX_VECTOR_CLONES Traffic unpermute_backward(std::int64_t tokens, std::int64_t h, std::int64_t k,
                                             const std::int32_t* row_of, const float* probs, const float* expert_out,
                                             const float* dout, float* dexpert_out, float* dprobs) {
  for (std::int64_t i = 0; i < tokens * k; ++i) {
    const float* dy = dout + (i / k) * h;
    const std::int64_t row = row_of[i];
    float* de = dexpert_out + row * h;
    const float p = probs[i];
    for (std::int64_t j = 0; j < h; ++j) de[j] = p * dy[j];
    dprobs[i] = lane_dot(dy, expert_out + row * h, h);
  }
  return {fl(tokens * h + tokens * k * h + 2 * tokens * k), fl(tokens * k * h + tokens * k)};
}

SAX_VECTOR_CLONES Traffic adam(std::int64_t n, float* param, const float* grad, float* m, float* v, float lr,
                               float beta1, float beta2, float eps, float weight_decay, std::int64_t step) {
  const auto c1 = static_cast<float>(1 - std::pow(beta1, static_cast<double>(step))),
             c2 = static_cast<float>(1 - std::pow(beta2, static_cast<double>(step)));
  const float inv_c1 = 1.0f / c1, inv_c2 = 1.0f / c2;
  for (std::int64_t i = 0; i < n; ++i) {
    const float mi = beta1 * m[i] + (1 - beta1) * grad[i], vi = beta2 * v[i] + (1 - beta2) * grad[i] * grad[i];
    m[i] = mi, v[i] = vi;
    param[i] -= lr * ((mi * inv_c1) / (std::sqrt(vi * inv_c2) + eps) + weight_decay * param[i]);
  }
  return {fl(4 * n), fl(3 * n)};
}

Traffic copy(std::int64_t n, const float* src, float* dst) {
  std::copy(src, src + n, dst);
  return {fl(n), fl(n)};
}

Traffic grad_norm_sq(std::int64_t n, const float* grad, float* out) {
  const float norm = cblas_snrm2(static_cast<blasint>(n), grad, 1);
  *out = norm * norm;
  return {fl(n), 0};
}

}  // namespace sax::kernels::cpu
