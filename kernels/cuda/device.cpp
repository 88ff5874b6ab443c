#include "kernels/device.hpp"

#include <cuda_runtime.h>

namespace sax::kernels {

CudaDevices cuda_devices() {
  CudaDevices d;
  d.compiled = true;
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    d.reason = std::string("no usable CUDA device (") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err) + ")";
    (void)cudaGetLastError();  // clear the sticky error for later callers
    return d;
  }
  if (n == 0) {
    d.reason = "no CUDA device present";
    return d;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) d.name = prop.name;
  d.count = n;
  return d;
}

}  // namespace sax::kernels
