// Host shim: lets g++ compile and run a CUDA kernel source (.cu) on the CPU, one thread at a time.
//
// It defines what NVRTC/nvcc provide built in: the function qualifiers, dim3, threadIdx /
// blockIdx / blockDim / gridDim and the integer min/max overloads; <cmath> provides the float
// functions with the same IEEE semantics (rintf rounds half to even, like the GPU's). The fp16
// type comes from shim_include/cuda_fp16.h. `shim_launch_packed` runs a kernel over the whole
// grid with its parameters given as cuLaunchKernel's `kernelParams` (an array of pointers to
// the values), so the test drives the kernel with the very argument packing the GPU path uses.
//
// Valid for kernels that use no shared memory, no __syncthreads and no atomics (each thread
// then depends on nothing another thread does, and running them in sequence is a legal
// schedule). Compile with -ffp-contract=off: the GPU path compiles with --fmad=false.
//
// Kernels read frames through EDGE_LOAD16(p) (an aligned 16-byte load, __ldg on the GPU); the
// shim's version counts the loads and those not 16-byte aligned (which the GPU would fault on):
// `shim_loads()` / `shim_misaligned_loads()`, reset by every launch.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

struct dim3 {
    unsigned int x, y, z;
};

static thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

struct uint4 {
    unsigned int x, y, z, w;
};

static unsigned long long shim_load_count = 0, shim_misaligned_count = 0;

static inline uint4 shim_load16(const void* p)
{
    ++shim_load_count;
    if (reinterpret_cast<std::size_t>(p) % 16 != 0) {
        ++shim_misaligned_count;
    }
    uint4 v;
    std::memcpy(&v, p, 16);
    return v;
}

#define EDGE_LOAD16(p) shim_load16(p)

using std::max;
using std::min;

template <typename... A, std::size_t... I>
static void shim_call_packed(void (*kernel)(A...), void** params, std::index_sequence<I...>)
{
    kernel(*static_cast<typename std::remove_reference<A>::type*>(params[I])...);
}

template <typename... A>
static void shim_launch_packed(void (*kernel)(A...), dim3 grid, dim3 block, void** params)
{
    gridDim = grid;
    blockDim = block;
    shim_load_count = shim_misaligned_count = 0;
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx)
                for (unsigned tz = 0; tz < block.z; ++tz)
                    for (unsigned ty = 0; ty < block.y; ++ty)
                        for (unsigned tx = 0; tx < block.x; ++tx) {
                            blockIdx = dim3{bx, by, bz};
                            threadIdx = dim3{tx, ty, tz};
                            shim_call_packed(kernel, params, std::index_sequence_for<A...>{});
                        }
}
