#include "profiles/cupti/cupti_source.hpp"

#include <cupti.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "profiles/host_recorder.hpp"
#include "spec/checks/cupti.hpp"
#include "spec/error.hpp"

namespace sax::profiles {

namespace {

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET,
                                         CUPTI_ACTIVITY_KIND_RUNTIME,
                                         CUPTI_ACTIVITY_KIND_DRIVER,
                                         CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                         CUPTI_ACTIVITY_KIND_MARKER};

constexpr std::size_t kBufferBytes = 8u << 20;  // CUPTI's recommended size order; 8 records' worth is too few
constexpr std::size_t kAlign = 8;

// CUPTI's callbacks are plain functions: the one active source receives them.
struct Completed {
  std::uint8_t* buffer;
  std::size_t valid;
};
std::mutex g_mutex;
std::vector<Completed> g_completed;
std::atomic<std::uint64_t> g_dropped{0};

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext context, std::uint32_t stream, std::uint8_t* buffer, std::size_t,
                               std::size_t valid) {
  std::size_t dropped = 0;
  // Tolerated: this runs on CUPTI's thread, where nothing may throw; a failure loses only the count.
  if (cuptiActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS) g_dropped += dropped;
  std::lock_guard lock(g_mutex);
  g_completed.push_back({buffer, valid});
}

MemcpyKind copy_kind(std::uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return MemcpyKind::htod;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return MemcpyKind::dtoh;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return MemcpyKind::htoh;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return MemcpyKind::dtod;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return MemcpyKind::peer;
    default:
      return MemcpyKind::unknown;
  }
}

const char* api_name(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  const char* name = nullptr;
  // Tolerated: a callback id CUPTI cannot name (a newer API's) is recorded without its name.
  return cuptiGetCallbackName(domain, cbid, &name) == CUPTI_SUCCESS ? name : nullptr;
}

// The fields every record of device work has (kernels, copies, memsets), whatever its struct.
template <typename Record>
void device_work(ActivityKind kind, const Record& a, ActivityRecord& r) {
  r.kind = kind;
  r.start_ns = static_cast<std::int64_t>(a.start), r.end_ns = static_cast<std::int64_t>(a.end);
  r.device_id = a.deviceId, r.stream_id = a.streamId, r.correlation_id = a.correlationId;
}

}  // namespace

bool convert_cupti_record(const void* record, ActivityRecord& r) {
  const auto* a = static_cast<const CUpti_Activity*>(record);
  r = ActivityRecord{};
  switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(a);
      device_work(ActivityKind::concurrent_kernel, *k, r);
      r.name = k->name;
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(a);
      device_work(ActivityKind::memcpy, *m, r);
      r.bytes = m->bytes, r.copy_kind = copy_kind(m->copyKind);
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(a);
      device_work(ActivityKind::memset, *m, r);
      r.bytes = m->bytes;
      return true;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const auto* api = reinterpret_cast<const CUpti_ActivityAPI*>(a);
      const bool runtime = a->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
      r.kind = runtime ? ActivityKind::runtime : ActivityKind::driver;
      r.start_ns = static_cast<std::int64_t>(api->start), r.end_ns = static_cast<std::int64_t>(api->end);
      r.thread_id = api->threadId, r.correlation_id = api->correlationId;
      r.name = api_name(runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, api->cbid);
      return true;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const auto* x = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(a);
      r.kind = ActivityKind::external_correlation;
      r.correlation_id = x->correlationId, r.external_id = x->externalId;
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MARKER: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMarker2*>(a);
      r.kind = ActivityKind::marker;
      r.start_ns = r.end_ns = static_cast<std::int64_t>(m->timestamp);
      r.marker_id = m->id;
      r.thread_id = m->objectId.pt.threadId;
      r.name = m->name;
      r.marker_phase = (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) != 0 ? MarkerPhase::start
                       : (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) != 0 ? MarkerPhase::end
                                                                          : MarkerPhase::instant;
      return true;
    }
    default:
      return false;
  }
}

namespace {

class CuptiSource final : public ActivitySource {
 public:
  void start() override {
    SAX_CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    for (CUpti_ActivityKind k : kKinds) SAX_CUPTI_CHECK(cuptiActivityEnable(k));
  }
  void stop() override {
    // Tolerated: stop runs on every way out, a failed run's too; a failure loses only undelivered records.
    for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }
  void flush(const ActivityCallback& deliver) override {
    SAX_CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    std::vector<Completed> done;
    {
      std::lock_guard lock(g_mutex);
      done.swap(g_completed);
    }
    ActivityRecord r;
    for (const Completed& c : done) {
      CUpti_Activity* record = nullptr;
      // A buffer's records end with CUPTI_ERROR_MAX_LIMIT_REACHED: not an error, the loop's end.
      while (cuptiActivityGetNextRecord(c.buffer, c.valid, &record) == CUPTI_SUCCESS)
        if (convert_cupti_record(record, r)) deliver(r);
      std::free(c.buffer);
    }
  }
  std::uint64_t take_dropped() override { return g_dropped.exchange(0); }
  ~CuptiSource() override {
    for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
    std::lock_guard lock(g_mutex);
    for (const Completed& c : g_completed) std::free(c.buffer);
    g_completed.clear();
  }
};

}  // namespace

std::unique_ptr<ActivitySource> make_cupti_source() { return std::make_unique<CuptiSource>(); }

std::int64_t cupti_clock_offset_ns() {
  std::int64_t best = std::numeric_limits<std::int64_t>::max(), offset = 0;
  for (int i = 0; i < 8; ++i) {
    std::uint64_t c = 0;
    const std::int64_t h0 = now_ns();
    SAX_CUPTI_CHECK(cuptiGetTimestamp(&c));  // without it the trace's device records would be misplaced
    const std::int64_t h1 = now_ns();
    if (h1 - h0 < best) best = h1 - h0, offset = h0 + (h1 - h0) / 2 - static_cast<std::int64_t>(c);
  }
  return offset;
}

bool route_nvtx_to_cupti() {
  if (std::getenv("NVTX_INJECTION64_PATH") != nullptr) return false;
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&cuptiActivityEnable), &info) == 0 || info.dli_fname == nullptr)
    return false;
  return setenv("NVTX_INJECTION64_PATH", info.dli_fname, 0) == 0;
}

void push_external_id(std::uint64_t id) {
  SAX_CUPTI_CHECK(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id));
}

void pop_external_id() {
  std::uint64_t id = 0;
  // Tolerated: called from a destructor (harness/executor.cpp), where a throw would terminate.
  cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id);
}

}  // namespace sax::profiles
