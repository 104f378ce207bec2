// Frame -> network input tensor on the GPU: the same result as edge_sdk.preprocess.Preprocessor.
//
// Input: a BGR uint8 frame (H, W, 3) whose rows are `pitch` bytes apart (pitch >= 3 * W), read
// through a device pointer (mapped host memory on a Jetson, device memory elsewhere).
// Output: NCHW planes, float32 or float16, each value (pixel - mean[c]) * scale[c].
//
// Each output pixel is resampled the way cv2.resize does it for the CPU Preprocessor, so a
// network calibrated on CPU-preprocessed images sees the same numbers:
//   RESIZE_LINEAR     cv2.INTER_LINEAR (the CPU uses it when the width grows or stays)
//   RESIZE_AREA       cv2.INTER_AREA when neither axis grows: the area-weighted average of
//                     every source pixel the output pixel covers (OpenCV computeResizeAreaTab)
//   RESIZE_AREA_GROW  cv2.INTER_AREA when an axis grows: OpenCV's bilinear variant for that case
// The resampled value is rounded to an integer grey level, as the CPU's uint8 canvas does.
//
// One thread per output pixel, all three channels; no shared memory and no __syncthreads, so
// the host shim of the tests can run the very same source one thread at a time.
//
// Frame bytes are read with aligned 16-byte loads (ByteReader), never one byte at a time. On a
// Jetson page-locked and mapped memory is not cached for the GPU ("CUDA for Tegra", memory
// selection): every load of a frame there goes to DRAM, so a thread that read its ~12 (bilinear)
// to ~100 (area, 4K) bytes one by one paid a DRAM transaction for each. A 16-byte load fetches
// what a byte load fetched, 16 bytes at a time; the bytes are then taken from registers in the
// order the arithmetic needs them, so the result is bit for bit what byte loads gave. Only
// aligned blocks that hold a byte the thread needs are read: such a block never leaves the
// allocation (allocations are at least 16-byte aligned, and every buffer a frame lies in is
// allocated in whole blocks: edge_sdk.cuda.api.padded_size).
#include <cuda_fp16.h>

#ifndef EDGE_LOAD16
#define EDGE_LOAD16(p) __ldg((const uint4*)(p))  // read-only path; the frame does not change during the kernel
#endif

#define RESIZE_LINEAR 0
#define RESIZE_AREA 1
#define RESIZE_AREA_GROW 2

// One crop of the frame and where its resized image lands in one batch slot. The ROI kernel
// reads these from memory: 9 int32 each, the layout of SLOT_DTYPE in edge_sdk/cuda/preprocess.py.
struct Slot {
    int x, y, w, h;      // crop in the frame
    int rx, ry, rw, rh;  // placement in the network input (letterbox or stretch)
    int mode;            // RESIZE_*
};

// Two-tap position along one axis, in OpenCV's coordinates (computed in double, as it does).
// Columns outside the image are clamped with their weight (fx = 0). Rows are not: OpenCV keeps
// the fractional weight and clamps only the row indices, so a border row blends row 0 with
// itself; its fixed-point vertical pass truncates that blend differently, and matching it
// takes the same two taps.
__device__ __forceinline__ void linear_taps(int d, int src_len, int dst_len, int mode, int clamp_weight, int* i0,
                                            int* i1, float* f)
{
    double inv_scale = (double)dst_len / (double)src_len;
    double scale = 1.0 / inv_scale;
    float fx;
    int sx;
    if (mode == RESIZE_AREA_GROW) {
        sx = (int)floor(d * scale);
        fx = (float)((d + 1) - (sx + 1) * inv_scale);
        fx = fx <= 0.f ? 0.f : fx - floorf(fx);
    } else {
        fx = (float)((d + 0.5) * scale - 0.5);
        sx = (int)floorf(fx);
        fx -= (float)sx;
    }
    if (clamp_weight) {
        if (sx < 0) {
            sx = 0;
            fx = 0.f;
        }
        if (sx >= src_len - 1) {
            sx = src_len - 1;
            fx = 0.f;
        }
    }
    *i0 = min(max(sx, 0), src_len - 1);
    *i1 = min(max(sx + 1, 0), src_len - 1);
    *f = fx;
}

// Source span of output index d for the area filter (OpenCV computeResizeAreaTab, per axis,
// in double as it computes them): full cells s1 .. s2 - 1 weigh 1 / cell; a partial cell
// s1 - 1 before them weighs `w_before`, a partial cell s2 after them `w_after`.
struct Span {
    int first, last, s1, s2;
    float w_before, w_full, w_after;
};

__device__ __forceinline__ Span area_span(int d, int src_len, int dst_len)
{
    double scale = 1.0 / ((double)dst_len / (double)src_len);
    double fs1 = d * scale;
    double fs2 = fs1 + scale;
    double cell = fmin(scale, src_len - fs1);
    Span sp;
    sp.s2 = min((int)floor(fs2), src_len - 1);
    sp.s1 = min((int)ceil(fs1), sp.s2);
    sp.w_full = (float)(1.0 / cell);
    sp.w_before = (float)((sp.s1 - fs1) / cell);
    sp.w_after = (float)(fmin(fmin(fs2 - sp.s2, 1.0), cell) / cell);
    sp.first = (sp.s1 - fs1 > 1e-3) ? sp.s1 - 1 : sp.s1;
    sp.last = (fs2 - sp.s2 > 1e-3) ? sp.s2 : sp.s2 - 1;
    return sp;
}

__device__ __forceinline__ float span_weight(const Span& sp, int s)
{
    return s < sp.s1 ? sp.w_before : (s >= sp.s2 ? sp.w_after : sp.w_full);
}

// OpenCV's integer-factor shortcut (resizeAreaFast): both scales whole numbers.
__device__ __forceinline__ int whole_scale(int src_len, int dst_len)
{
    double scale = 1.0 / ((double)dst_len / (double)src_len);
    int i = (int)rint(scale);
    return fabs(scale - i) < 2.220446049250313e-16 ? i : 0;  // DBL_EPSILON
}

// Bytes in address order from `p` on, one aligned 16-byte load per block (loaded when the first
// byte of a block is asked for).
struct ByteReader {
    const unsigned char* block;  // the aligned block in `v`
    uint4 v;
    int k;  // the next byte's index in `v` (16: the next block)
};

__device__ __forceinline__ void reader_start(ByteReader& r, const unsigned char* p)
{
    size_t address = (size_t)p;
    r.block = (const unsigned char*)(address & ~(size_t)15);
    r.k = (int)(address & 15);
    r.v = EDGE_LOAD16(r.block);
}

__device__ __forceinline__ int reader_next(ByteReader& r)
{
    if (r.k == 16) {
        r.block += 16;
        r.v = EDGE_LOAD16(r.block);
        r.k = 0;
    }
    unsigned int word = (r.k & 8) ? ((r.k & 4) ? r.v.w : r.v.z) : ((r.k & 4) ? r.v.y : r.v.x);
    int b = (int)((word >> (8 * (r.k & 3))) & 0xffu);  // little endian, as every CUDA device and its hosts
    ++r.k;
    return b;
}

// Pixels x0 and x1 (x1 is x0 or x0 + 1) of a row: BGR of each.
__device__ __forceinline__ void read_pair(const unsigned char* row, int x0, int x1, int* a, int* b)
{
    ByteReader r;
    reader_start(r, row + 3 * x0);
    for (int c = 0; c < 3; ++c) {
        a[c] = reader_next(r);
    }
    for (int c = 0; c < 3; ++c) {
        b[c] = x1 != x0 ? reader_next(r) : a[c];
    }
}

// The resampled BGR value of output pixel (ox, oy) of the crop, rounded to a grey level.
__device__ __forceinline__ void resample(const unsigned char* __restrict__ frame, int pitch, const Slot& s, int ox,
                                         int oy, float* b, float* g, float* r)
{
    const unsigned char* base = frame + (size_t)s.y * pitch + (size_t)s.x * 3;
    if (s.mode == RESIZE_AREA) {
        int kx = whole_scale(s.w, s.rw), ky = whole_scale(s.h, s.rh);
        if (kx && ky) {
            // Integer sums. 2x2 rounds half up ((sum + 2) >> 2, its SIMD path); other factors
            // multiply by 1/area in float and round half to even.
            int sum[3] = {0, 0, 0};
            for (int sy = oy * ky; sy < (oy + 1) * ky; ++sy) {
                ByteReader r;
                reader_start(r, base + (size_t)sy * pitch + 3 * (ox * kx));
                for (int k = 0; k < kx; ++k) {
                    sum[0] += reader_next(r);
                    sum[1] += reader_next(r);
                    sum[2] += reader_next(r);
                }
            }
            float inv_area = 1.f / (float)(kx * ky);
            float v[3];
            for (int c = 0; c < 3; ++c) {
                v[c] = (kx == 2 && ky == 2) ? (float)((sum[c] + 2) >> 2) : fminf(rintf((float)sum[c] * inv_area), 255.f);
            }
            *b = v[0];
            *g = v[1];
            *r = v[2];
            return;
        }
        float acc0 = 0.f, acc1 = 0.f, acc2 = 0.f;
        Span xs = area_span(ox, s.w, s.rw);
        Span ys = area_span(oy, s.h, s.rh);
        for (int sy = ys.first; sy <= ys.last; ++sy) {
            ByteReader r;
            reader_start(r, base + (size_t)sy * pitch + 3 * xs.first);
            float r0 = 0.f, r1 = 0.f, r2 = 0.f;
            for (int sx = xs.first; sx <= xs.last; ++sx) {
                float wx = span_weight(xs, sx);
                r0 += (float)reader_next(r) * wx;
                r1 += (float)reader_next(r) * wx;
                r2 += (float)reader_next(r) * wx;
            }
            float wy = span_weight(ys, sy);
            acc0 += wy * r0;
            acc1 += wy * r1;
            acc2 += wy * r2;
        }
        *b = fminf(fmaxf(rintf(acc0), 0.f), 255.f);
        *g = fminf(fmaxf(rintf(acc1), 0.f), 255.f);
        *r = fminf(fmaxf(rintf(acc2), 0.f), 255.f);
        return;
    }
    // Two taps per axis in OpenCV's fixed point: weights in 1/2048 (INTER_RESIZE_COEF_BITS = 11),
    // a horizontal pass exact in int32, then its vertical pass as its SIMD code computes it
    // (VResizeLinearVec_32s8u: operands shifted right by 4, high halves of 16-bit products,
    // +2 >> 2), whose truncations the plain float formula would miss on ~1 pixel in 8.
    int x0, x1, y0, y1;
    float fx, fy;
    linear_taps(ox, s.w, s.rw, s.mode, 1, &x0, &x1, &fx);
    linear_taps(oy, s.h, s.rh, s.mode, 0, &y0, &y1, &fy);
    int a0 = (int)rintf((1.f - fx) * 2048.f), a1 = (int)rintf(fx * 2048.f);
    int b0 = (int)rintf((1.f - fy) * 2048.f), b1 = (int)rintf(fy * 2048.f);
    int p00[3], p01[3], p10[3], p11[3];
    read_pair(base + (size_t)y0 * pitch, x0, x1, p00, p01);
    if (y1 != y0) {
        read_pair(base + (size_t)y1 * pitch, x0, x1, p10, p11);
    } else {
        for (int c = 0; c < 3; ++c) {
            p10[c] = p00[c];
            p11[c] = p01[c];
        }
    }
    float v[3];
    for (int c = 0; c < 3; ++c) {
        int top = p00[c] * a0 + p01[c] * a1;
        int bottom = p10[c] * a0 + p11[c] * a1;
        int sum = (((top >> 4) * b0) >> 16) + (((bottom >> 4) * b1) >> 16);
        v[c] = (float)min(max((sum + 2) >> 2, 0), 255);
    }
    *b = v[0];
    *g = v[1];
    *r = v[2];
}

// Store one normalized value. float16 rounds twice, as numpy does on the CPU (the subtraction
// and the multiplication each produce a float16), so both paths give the same bits.
__device__ __forceinline__ void store(void* __restrict__ out, size_t i, float v, float mean, float scale, int fp16)
{
    if (fp16) {
        float centred = __half2float(__float2half_rn(v - mean));
        ((__half*)out)[i] = __float2half_rn(centred * scale);
    } else {
        ((float*)out)[i] = (v - mean) * scale;
    }
}

__device__ __forceinline__ void preprocess_pixel(const unsigned char* __restrict__ frame, int pitch, const Slot& s,
                                                 void* __restrict__ out, size_t slot_offset, int out_w, int out_h,
                                                 int ox, int oy, int rgb, int fp16, int pad, float m0, float m1,
                                                 float m2, float k0, float k1, float k2)
{
    float b, g, r;
    int ix = ox - s.rx, iy = oy - s.ry;
    if (ix >= 0 && iy >= 0 && ix < s.rw && iy < s.rh) {
        resample(frame, pitch, s, ix, iy, &b, &g, &r);
    } else {
        b = g = r = (float)pad;
    }
    float c0 = rgb ? r : b;
    float c2 = rgb ? b : r;
    size_t plane = (size_t)out_w * out_h;
    size_t i = slot_offset + (size_t)oy * out_w + ox;
    store(out, i, c0, m0, k0, fp16);
    store(out, i + plane, g, m1, k1, fp16);
    store(out, i + 2 * plane, c2, m2, k2, fp16);
}

// (a) One whole frame into one batch slot. `out` points at that slot: (3, out_h, out_w).
// Grid: (ceil(out_w / block.x), ceil(out_h / block.y), 1).
extern "C" __global__ void preprocess_frame(const unsigned char* __restrict__ frame, int width, int height, int pitch,
                                           void* __restrict__ out, int out_w, int out_h, int rx, int ry, int rw,
                                           int rh, int mode, int rgb, int fp16, int pad, float m0, float m1,
                                           float m2, float k0, float k1, float k2)
{
    int ox = blockIdx.x * blockDim.x + threadIdx.x;
    int oy = blockIdx.y * blockDim.y + threadIdx.y;
    if (ox >= out_w || oy >= out_h) {
        return;
    }
    Slot s;
    s.x = 0;
    s.y = 0;
    s.w = width;
    s.h = height;
    s.rx = rx;
    s.ry = ry;
    s.rw = rw;
    s.rh = rh;
    s.mode = mode;
    preprocess_pixel(frame, pitch, s, out, 0, out_w, out_h, ox, oy, rgb, fp16, pad, m0, m1, m2, k0, k1, k2);
}

// (b) N crops of one frame, crop i into batch slot first + i, in one launch.
// Grid: (ceil(out_w / block.x), ceil(out_h / block.y), n).
extern "C" __global__ void preprocess_rois(const unsigned char* __restrict__ frame, int pitch,
                                          const Slot* __restrict__ slots, int n, void* __restrict__ out, int first,
                                          int out_w, int out_h, int rgb, int fp16, int pad, float m0, float m1,
                                          float m2, float k0, float k1, float k2)
{
    int ox = blockIdx.x * blockDim.x + threadIdx.x;
    int oy = blockIdx.y * blockDim.y + threadIdx.y;
    int i = blockIdx.z;
    if (ox >= out_w || oy >= out_h || i >= n) {
        return;
    }
    Slot s = slots[i];
    size_t slot_offset = (size_t)(first + i) * 3 * out_w * out_h;
    preprocess_pixel(frame, pitch, s, out, slot_offset, out_w, out_h, ox, oy, rgb, fp16, pad, m0, m1, m2, k0, k1, k2);
}
