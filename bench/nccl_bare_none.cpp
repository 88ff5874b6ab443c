// Builds without CUDA: there is no NCCL loop to time.
#include "bench/nccl_bare.hpp"

namespace sax::bench {

std::unique_ptr<BareNccl> make_bare_nccl(int) { return nullptr; }

}  // namespace sax::bench
