// A created CUDA stream and a graph captured on it, for the GPU tests that check that a call
// captures into a CUDA graph and replays correctly.
#pragma once

#include <cuda_runtime.h>

#include <functional>

#include "device_buffer.hpp"
#include "hopattn/options.hpp"

namespace hopattn::testing {

class CudaStream {
 public:
  CudaStream() { check_cuda(cudaStreamCreate(&s_), "cudaStreamCreate"); }
  ~CudaStream() {
    if (s_ != nullptr) cudaStreamDestroy(s_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return s_; }
  Stream api() const { return reinterpret_cast<Stream>(s_); }
  void sync(const char* what) const {
    check_cuda(cudaStreamSynchronize(s_), what);
    check_cuda(cudaGetLastError(), what);
  }

 private:
  cudaStream_t s_ = nullptr;
};

// `body` captured once into a graph on `stream`; launch() replays it and waits.
class GraphExec {
 public:
  GraphExec() = default;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  ~GraphExec() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
  }
  void capture(const CudaStream& stream, const std::function<void()>& body) {
    check_cuda(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal),
               "cudaStreamBeginCapture");
    try {
      body();
    } catch (...) {
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(stream.get(), &g);
      if (g != nullptr) cudaGraphDestroy(g);
      cudaGetLastError();
      throw;
    }
    check_cuda(cudaStreamEndCapture(stream.get(), &graph_), "cudaStreamEndCapture");
    check_cuda(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
  }
  void launch(const CudaStream& stream) {
    check_cuda(cudaGraphLaunch(exec_, stream.get()), "cudaGraphLaunch");
    stream.sync("graph replay");
  }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace hopattn::testing
