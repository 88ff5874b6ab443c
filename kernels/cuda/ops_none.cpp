// Builds without the CUDA toolkit: the CUDA ops say why they are absent.
#include "kernels/ops.hpp"
#include "spec/error.hpp"

namespace sax::kernels {

std::unique_ptr<Ops> make_cuda_ops(Device&) {
  throw UsageError("the CUDA ops are not available: this sax was built without the CUDA toolkit");
}

}  // namespace sax::kernels
