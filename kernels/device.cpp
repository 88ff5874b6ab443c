#include "kernels/device.hpp"

namespace sax::kernels {

std::string default_backend(const CudaDevices& devices) { return devices.count > 0 ? "cuda" : "cpu"; }

}  // namespace sax::kernels
