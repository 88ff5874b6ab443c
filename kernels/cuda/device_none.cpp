// Stub for builds without the CUDA toolkit: the CPU backend is all there is.
#include "kernels/device.hpp"

namespace sax::kernels {

CudaDevices cuda_devices() {
  CudaDevices d;
  d.reason = "sax was built without CUDA (SAX_CUDA=OFF or no toolkit found)";
  return d;
}

}  // namespace sax::kernels
