// The real ActivitySource (profiles/activity.hpp): CUPTI's Activity API, after kineto's
// CuptiActivityApi. Buffers are handed to CUPTI from a pool allocated up front and taken back,
// completed, on CUPTI's thread; flush() forces completion (cuptiActivityFlushAll), walks each
// buffer's records and delivers them as ActivityRecords. Kinds: CONCURRENT_KERNEL (NCCL's kernels
// too), MEMCPY, MEMSET, RUNTIME, DRIVER, EXTERNAL_CORRELATION, MARKER (NVTX ranges). Only built
// with the CUDA toolkit; needs no driver to construct, but records nothing without a device.
#pragma once

#include <cstdint>
#include <memory>

#include "profiles/activity.hpp"

namespace sax::profiles {

// One record of a CUPTI activity buffer (a CUpti_Activity*) as an ActivityRecord; false for a
// kind sax does not ask for. The real source's conversion, exposed so that tests can feed it
// records laid out as CUPTI lays them out (no device needed). Always false without CUPTI.
bool convert_cupti_record(const void* record, ActivityRecord& out);

// A CUPTI-backed source, or null when this build has no CUPTI.
std::unique_ptr<ActivitySource> make_cupti_source();

// Host clock (now_ns) minus CUPTI's clock (cuptiGetTimestamp), from the closest of a few paired
// readings: ActivityProcessor::set_clock_offset_ns takes it. 0 without CUPTI.
std::int64_t cupti_clock_offset_ns();

// Routes NVTX ranges to CUPTI, so that they arrive as MARKER records: NVTX hands its calls to the
// library NVTX_INJECTION64_PATH names, read once, at the process's first NVTX call (NCCL's own
// included) — so call this before any. Sets it to the libcupti this program loaded, unless the
// user set it (Nsight Systems, say). False without CUPTI or when it is set already.
bool route_nvtx_to_cupti();

// The host range device work is launched from, as CUPTI's external correlation id (CUSTOM0):
// kernels launched between push and pop carry `id`. No-ops without CUPTI.
void push_external_id(std::uint64_t id);
void pop_external_id();

}  // namespace sax::profiles
