// The device a rank computes on, behind one interface: it hands out the memory the kernels and the
// collectives use, and the streams on which both enqueue, so that a step can order and overlap
// compute and communication (the NCCL communicator takes the communication stream; see
// collectives/factory.hpp). The CPU backend: host memory, null streams (work runs on the calling
// thread; communication overlaps through MPI's nonblocking operations). The CUDA backend:
// device memory and CUDA streams, compiled only where the toolkit was found (SAX_HAVE_CUDA), using
// the runtime API only so that a build with CUDA still starts on a machine without a driver.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "spec/cluster.hpp"
#include "spec/stream.hpp"

namespace sax::kernels {

struct CudaDevices {
  bool compiled = false;  // this build has the CUDA backend
  int count = 0;          // usable devices
  std::string name;       // of device 0, when count > 0
  std::string reason;     // why count is 0 ("built without CUDA", "no CUDA driver", ...)
};

// Asks the CUDA runtime (never fails: a missing driver is a reason, not an error).
CudaDevices cuda_devices();

// Memory on a device. upload/download move host bytes in and out.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual std::size_t bytes() const = 0;
  virtual void upload(const void* host, std::size_t bytes) = 0;
  virtual void download(void* host, std::size_t bytes) const = 0;
};

// A point in a stream's work: recorded on one stream, waited for by another or by the host.
class Event {
 public:
  virtual ~Event() = default;
  virtual void record(Stream stream) = 0;
  virtual void wait(Stream waiter) = 0;  // `waiter`'s later work starts after the recorded point
  virtual void synchronize() = 0;        // the host waits
  virtual bool done() = 0;               // never blocks
  // Microseconds from `start`'s recorded point to this one's; both made with timing on and
  // complete. CUDA: the device's clock between the two points (cudaEventElapsedTime); CPU: the
  // host's steady clock when each was recorded (work runs on the calling thread).
  virtual double elapsed_us(const Event& start) const = 0;
};

// Work captured once and launched many times (a CUDA graph): what nccl-tests' -G times.
class Graph {
 public:
  virtual ~Graph() = default;
  virtual void launch(Stream stream) = 0;  // enqueues the captured work once
};

class Device {
 public:
  virtual ~Device() = default;
  virtual Backend backend() const = 0;
  virtual int index() const = 0;
  virtual std::string name() const = 0;
  virtual std::unique_ptr<Buffer> allocate(std::size_t bytes) = 0;  // zero-filled
  // Memory free for allocate() now (CPU: physical pages not in use; CUDA: cudaMemGetInfo), so
  // that a caller can refuse an op that does not fit before allocating; 0 where unknown.
  virtual double free_bytes() const = 0;
  // Where compute kernels and collectives run; different streams so that they can overlap.
  virtual Stream compute_stream() = 0;
  virtual Stream comm_stream() = 0;
  // `timing`: the event can be set against another (elapsed_us); costs a little on CUDA.
  virtual std::unique_ptr<Event> make_event(bool timing) = 0;
  virtual void synchronize(Stream stream) = 0;  // the host waits for the stream's work
  // Runs `enqueue` while capturing what it enqueues on `stream` into a graph, not running it
  // (CUDA stream capture). The CPU backend has nothing to capture: a UsageError.
  virtual std::unique_ptr<Graph> capture(Stream stream, const std::function<void()>& enqueue) = 0;
};

// Backend::cpu, or CUDA device `index` (a UsageError where this build has no CUDA backend).
std::unique_ptr<Device> make_device(Backend backend, int index = 0);

}  // namespace sax::kernels
