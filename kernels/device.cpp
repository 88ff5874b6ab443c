#include "kernels/device.hpp"

namespace sax::kernels {

std::string default_backend() { return cuda_devices().count > 0 ? "cuda" : "cpu"; }

}  // namespace sax::kernels
