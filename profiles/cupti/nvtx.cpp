#include "profiles/nvtx.hpp"

#include <nvtx3/nvToolsExt.h>

namespace sax::profiles::nvtx {

namespace {
nvtxDomainHandle_t domain() {
  static const nvtxDomainHandle_t d = nvtxDomainCreateA("sax");
  return d;
}
}  // namespace

bool built() { return true; }

void push(const char* name) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  nvtxDomainRangePushEx(domain(), &a);
}

void pop() { nvtxDomainRangePop(domain()); }

}  // namespace sax::profiles::nvtx
