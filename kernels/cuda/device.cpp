// The CUDA device: device memory, a compute and a communication stream, events — through the
// runtime API only, every call checked (spec/checks/cuda.hpp).
#include "kernels/device.hpp"

#include <cuda_runtime.h>

#include "spec/checks/cuda.hpp"

namespace sax::kernels {

CudaDevices cuda_devices() {
  CudaDevices d;
  d.compiled = true;
  int n = 0;
  // Asked, not checked: no driver is an answer here (the CPU backend), not a failure.
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    d.reason = "no usable CUDA device (" + checks::cuda_error_text(err) + ")";
    (void)cudaGetLastError();  // clear the error for later callers
    return d;
  }
  if (n == 0) {
    d.reason = "no CUDA device present";
    return d;
  }
  cudaDeviceProp prop{};
  SAX_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  d.name = prop.name;
  d.count = n;
  return d;
}

namespace {

class DeviceBuffer final : public Buffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    SAX_CUDA_CHECK(cudaMalloc(&data_, bytes ? bytes : 1));
    SAX_CUDA_CHECK(cudaMemset(data_, 0, bytes ? bytes : 1));
  }
  ~DeviceBuffer() override { cudaFree(data_); }
  void* data() override { return data_; }
  std::size_t bytes() const override { return bytes_; }
  void upload(const void* host, std::size_t n) override {
    SAX_CUDA_CHECK(cudaMemcpy(data_, host, n, cudaMemcpyHostToDevice));
  }
  void download(void* host, std::size_t n) const override {
    SAX_CUDA_CHECK(cudaMemcpy(host, data_, n, cudaMemcpyDeviceToHost));
  }

 private:
  std::size_t bytes_;
  void* data_ = nullptr;
};

cudaStream_t native(Stream s) { return static_cast<cudaStream_t>(s.native); }

class CudaEvent final : public Event {
 public:
  CudaEvent() { SAX_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  void record(Stream s) override { SAX_CUDA_CHECK(cudaEventRecord(event_, native(s))); }
  void wait(Stream waiter) override { SAX_CUDA_CHECK(cudaStreamWaitEvent(native(waiter), event_, 0)); }
  void synchronize() override { SAX_CUDA_CHECK(cudaEventSynchronize(event_)); }
  bool done() override {
    const cudaError_t rc = cudaEventQuery(event_);
    if (rc == cudaErrorNotReady) return false;
    SAX_CUDA_CHECK(rc);
    return true;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int index) : index_(index) {
    SAX_CUDA_CHECK(cudaSetDevice(index));
    cudaDeviceProp prop{};
    SAX_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
    name_ = prop.name;
    SAX_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    SAX_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
  }
  ~CudaDevice() override {
    cudaStreamSynchronize(compute_), cudaStreamSynchronize(comm_);
    cudaStreamDestroy(compute_), cudaStreamDestroy(comm_);
  }
  Backend backend() const override { return Backend::cuda; }
  int index() const override { return index_; }
  std::string name() const override { return name_; }
  std::unique_ptr<Buffer> allocate(std::size_t bytes) override { return std::make_unique<DeviceBuffer>(bytes); }
  Stream compute_stream() override { return {compute_}; }
  Stream comm_stream() override { return {comm_}; }
  std::unique_ptr<Event> make_event() override { return std::make_unique<CudaEvent>(); }
  void synchronize(Stream s) override { SAX_CUDA_CHECK(cudaStreamSynchronize(native(s))); }

 private:
  int index_;
  std::string name_;
  cudaStream_t compute_ = nullptr, comm_ = nullptr;
};

}  // namespace

std::unique_ptr<Device> make_cuda_device(int index) { return std::make_unique<CudaDevice>(index); }

}  // namespace sax::kernels
