// The CPU device: host memory, no streams (work runs on the calling thread), events that are
// always done and stamp the host's steady clock when recorded.
#include "kernels/device.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <new>

#include "spec/error.hpp"

namespace sax::kernels {

namespace {

// Host memory, zeroed. A large buffer is its own mapping on 2 MiB boundaries with transparent huge
// pages asked for: the kernel hands it over zeroed a huge page per fault instead of 512 small
// ones, which made filling a step's buffers most of a rank's start-up (seconds of CPU per rank).
class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes < kHuge) {
      small_.reset(new unsigned char[bytes ? bytes : 1]());
      data_ = small_.get();
      return;
    }
    mapped_ = (bytes + kHuge - 1) / kHuge * kHuge + kHuge;
    void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    base_ = p;
    const auto at = (reinterpret_cast<std::uintptr_t>(p) + kHuge - 1) / kHuge * kHuge;
    data_ = reinterpret_cast<unsigned char*>(at);
    ::madvise(data_, mapped_ - kHuge, MADV_HUGEPAGE);  // a hint: without THP it is small pages
  }
  ~HostBuffer() override {
    if (base_) ::munmap(base_, mapped_);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void* data() override { return data_; }
  std::size_t bytes() const override { return bytes_; }
  void upload(const void* host, std::size_t n) override { std::memcpy(data_, host, n); }
  void download(void* host, std::size_t n) const override { std::memcpy(host, data_, n); }

 private:
  static constexpr std::size_t kHuge = std::size_t{2} << 20;
  std::size_t bytes_, mapped_ = 0;
  std::unique_ptr<unsigned char[]> small_;
  void* base_ = nullptr;
  unsigned char* data_ = nullptr;
};

class HostEvent final : public Event {
 public:
  void record(Stream) override { at_ = std::chrono::steady_clock::now(); }
  void wait(Stream) override {}
  void synchronize() override {}
  bool done() override { return true; }
  double elapsed_us(const Event& start) const override {
    return std::chrono::duration<double, std::micro>(at_ - static_cast<const HostEvent&>(start).at_).count();
  }

 private:
  std::chrono::steady_clock::time_point at_{};
};

class CpuDevice final : public Device {
 public:
  Backend backend() const override { return Backend::cpu; }
  int index() const override { return 0; }
  std::string name() const override { return "cpu"; }
  std::unique_ptr<Buffer> allocate(std::size_t bytes) override { return std::make_unique<HostBuffer>(bytes); }
  double free_bytes() const override {
    const long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? static_cast<double>(pages) * static_cast<double>(size) : 0;
  }
  Stream compute_stream() override { return {}; }
  Stream comm_stream() override { return {}; }
  std::unique_ptr<Event> make_event(bool) override { return std::make_unique<HostEvent>(); }
  void synchronize(Stream) override {}
  std::unique_ptr<Graph> capture(Stream, const std::function<void()>&) override {
    throw UsageError("graph capture needs the CUDA backend (the CPU backend runs work as it is called)");
  }
};

}  // namespace

std::unique_ptr<Device> make_cuda_device(int index);  // cuda/device.cpp or cuda/device_none.cpp

std::unique_ptr<Device> make_device(Backend backend, int index) {
  if (backend == Backend::cuda) return make_cuda_device(index);
  return std::make_unique<CpuDevice>();
}

}  // namespace sax::kernels
