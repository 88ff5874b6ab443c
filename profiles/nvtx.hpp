// NVTX ranges (nvtx3, domain "sax") around the phases the executor knows, so that Nsight Systems
// and CUPTI's MARKER records (profiles/cupti/) show the step, each op by phase, micro-batch and
// stage, and each message by dimension and op ("dp.reduce_scatter"). Where the build has no CUDA
// toolkit these are no-ops; with it and no tool attached, NVTX's own check makes them nearly free.
#pragma once

namespace sax::profiles::nvtx {

// True when built with NVTX.
bool built();
// A range on the calling thread, in domain "sax"; pops must match pushes on the same thread.
void push(const char* name);
void pop();

class Range {
 public:
  explicit Range(const char* name) { push(name); }
  ~Range() { pop(); }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;
};

}  // namespace sax::profiles::nvtx
