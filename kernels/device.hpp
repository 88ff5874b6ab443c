// Which compute backends this build and this machine offer. The CUDA side is compiled only
// where the toolkit was found (SAX_HAVE_CUDA); it asks the runtime API, never the driver API,
// so a build with CUDA still starts on a machine without a driver.
#pragma once

#include <string>

namespace sax::kernels {

struct CudaDevices {
  bool compiled = false;  // this build has the CUDA backend
  int count = 0;          // usable devices
  std::string name;       // of device 0, when count > 0
  std::string reason;     // why count is 0 ("built without CUDA", "no CUDA driver", ...)
};

CudaDevices cuda_devices();

// "cuda" when `devices` has a usable CUDA device, otherwise "cpu".
std::string default_backend(const CudaDevices& devices);

}  // namespace sax::kernels
