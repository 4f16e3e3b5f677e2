// HOPATTN_HOST_DEVICE: functions that run on the GPU and also compile as plain C++, so that host
// planners and the CPU tests share them with the kernels.
#pragma once

#if defined(__CUDACC__)
#define HOPATTN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define HOPATTN_HOST_DEVICE inline
#endif
