#include "kernels/ops.hpp"

#include "spec/error.hpp"

namespace sax::kernels {

std::unique_ptr<Ops> make_cpu_ops(Device& device);   // cpu/cpu_ops.cpp
std::unique_ptr<Ops> make_cuda_ops(Device& device);  // cuda/ops.cu or cuda/ops_none.cpp

std::unique_ptr<Ops> make_ops(Device& device) {
  return device.backend() == Backend::cuda ? make_cuda_ops(device) : make_cpu_ops(device);
}

namespace {
const char* at(const void* p, std::int64_t elements, std::size_t bytes) {
  return static_cast<const char*>(p) + static_cast<std::size_t>(elements) * bytes;
}
char* at(void* p, std::int64_t elements, std::size_t bytes) {
  return static_cast<char*>(p) + static_cast<std::size_t>(elements) * bytes;
}
// One GEMM per group, as Megatron's sequential experts run them: group g's rows of X and Y
// follow group g−1's, its weight follows theirs. Calls f(g, first row, rows) for each group.
template <class F>
void for_groups(const std::vector<std::int64_t>& rows, F f) {
  std::int64_t r0 = 0;
  for (std::size_t g = 0; g < rows.size(); r0 += rows[g], ++g) f(static_cast<std::int64_t>(g), r0, rows[g]);
}
}  // namespace

Traffic Ops::grouped_linear_forward(const std::vector<std::int64_t>& rows, std::int64_t n, std::int64_t k,
                                    const void* x, const void* w, void* y) {
  const std::size_t e = activation_bytes();
  Traffic t;
  for_groups(rows, [&](std::int64_t g, std::int64_t r0, std::int64_t m) {
    if (m > 0) t += linear_forward(m, n, k, at(x, r0 * k, e), at(w, g * k * n, e), at(y, r0 * n, e));
  });
  return t;
}

Traffic Ops::grouped_linear_backward_input(const std::vector<std::int64_t>& rows, std::int64_t n, std::int64_t k,
                                           const void* dy, const void* w, void* dx) {
  const std::size_t e = activation_bytes();
  Traffic t;
  for_groups(rows, [&](std::int64_t g, std::int64_t r0, std::int64_t m) {
    if (m > 0) t += linear_backward_input(m, n, k, at(dy, r0 * n, e), at(w, g * k * n, e), at(dx, r0 * k, e));
  });
  return t;
}

Traffic Ops::grouped_linear_backward_weight(const std::vector<std::int64_t>& rows, std::int64_t n, std::int64_t k,
                                            const void* x, const void* dy, void* dw) {
  const std::size_t e = activation_bytes();
  Traffic t;
  for_groups(rows, [&](std::int64_t g, std::int64_t r0, std::int64_t m) {
    void* dwg = at(dw, g * k * n, e);
    if (m > 0)
      t += linear_backward_weight(m, n, k, at(x, r0 * k, e), at(dy, r0 * n, e), dwg);
    else
      fill(dwg, k * n, 0.0f);  // an expert that received nothing has a zero gradient
  });
  return t;
}

}  // namespace sax::kernels
