// Builds without the CUDA toolkit: the CPU backend is all there is, and the CUDA device says so.
#include "kernels/device.hpp"
#include "spec/error.hpp"

namespace sax::kernels {

CudaDevices cuda_devices() {
  CudaDevices d;
  d.reason = "sax was built without CUDA (SAX_CUDA=OFF or no toolkit found)";
  return d;
}

std::unique_ptr<Device> make_cuda_device(int) {
  throw UsageError("backend cuda: this sax was built without CUDA (SAX_CUDA=OFF or no toolkit found)");
}

}  // namespace sax::kernels
