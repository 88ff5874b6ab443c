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
    // The memset runs on the legacy default stream, which the device's non-blocking streams do
    // not wait for: finish it before a kernel on them can write the buffer.
    SAX_CUDA_CHECK(cudaDeviceSynchronize());
  }
  ~DeviceBuffer() override { cudaFree(data_); }
  void* data() override { return data_; }
  std::size_t bytes() const override { return bytes_; }
  // The copy runs on the legacy default stream: work of the device's non-blocking streams that
  // may still read the buffer is finished first.
  void upload(const void* host, std::size_t n) override {
    SAX_CUDA_CHECK(cudaDeviceSynchronize());
    SAX_CUDA_CHECK(cudaMemcpy(data_, host, n, cudaMemcpyHostToDevice));
    SAX_CUDA_CHECK(cudaDeviceSynchronize());  // from pageable memory the copy may still be in flight
  }
  // The caller has synchronised the stream that wrote the buffer (the legacy default stream this
  // copy runs on does not wait for the device's non-blocking streams).
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
  explicit CudaEvent(bool timing) {
    SAX_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
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
  double elapsed_us(const Event& start) const override {
    float ms = 0;
    SAX_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<const CudaEvent&>(start).event_, event_));
    return static_cast<double>(ms) * 1e3;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

class CudaGraph final : public Graph {
 public:
  CudaGraph(cudaStream_t stream, const std::function<void()>& enqueue) {
    // Relaxed: NCCL's own calls during capture (its proxy, cudaEventQuery) are allowed.
    SAX_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    try {
      enqueue();
    } catch (...) {
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(stream, &broken);
      if (broken) cudaGraphDestroy(broken);
      throw;
    }
    SAX_CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
    const cudaError_t rc = cudaGraphInstantiate(&exec_, graph_, 0);
    if (rc != cudaSuccess) {
      cudaGraphDestroy(graph_);  // the destructor does not run when the constructor throws
      SAX_CUDA_CHECK(rc);
    }
  }
  ~CudaGraph() override {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  void launch(Stream s) override { SAX_CUDA_CHECK(cudaGraphLaunch(exec_, static_cast<cudaStream_t>(s.native))); }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
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
  double free_bytes() const override {
    std::size_t free = 0, total = 0;
    SAX_CUDA_CHECK(cudaSetDevice(index_));
    SAX_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return static_cast<double>(free);
  }
  Stream compute_stream() override { return {compute_}; }
  Stream comm_stream() override { return {comm_}; }
  std::unique_ptr<Event> make_event(bool timing) override { return std::make_unique<CudaEvent>(timing); }
  void synchronize(Stream s) override { SAX_CUDA_CHECK(cudaStreamSynchronize(native(s))); }
  std::unique_ptr<Graph> capture(Stream s, const std::function<void()>& enqueue) override {
    return std::make_unique<CudaGraph>(native(s), enqueue);
  }

 private:
  int index_;
  std::string name_;
  cudaStream_t compute_ = nullptr, comm_ = nullptr;
};

}  // namespace

std::unique_ptr<Device> make_cuda_device(int index) { return std::make_unique<CudaDevice>(index); }

}  // namespace sax::kernels
