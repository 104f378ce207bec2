// Host stand-in for CUDA's cuda_fp16.h: the members preprocess.cu uses, with the semantics of
// the real header (IEEE binary16, round to nearest even; NaN and infinity kept).
#pragma once

#include <cstdint>
#include <cstring>

struct __half {
    std::uint16_t x;
};

inline __half __float2half_rn(float f)
{
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    std::uint32_t sign = (u >> 16) & 0x8000u;
    std::uint32_t exp = (u >> 23) & 0xffu;
    std::uint32_t man = u & 0x7fffffu;
    __half h;
    if (exp == 0xffu) {  // infinity or NaN
        h.x = (std::uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0u));
        return h;
    }
    int e = (int)exp - 127 + 15;
    if (e >= 31) {  // overflow: infinity
        h.x = (std::uint16_t)(sign | 0x7c00u);
        return h;
    }
    std::uint32_t mant = man | 0x800000u;  // 24 significant bits
    int shift;
    if (e <= 0) {  // subnormal half (or zero)
        shift = 14 - e;
        if (shift > 24 || exp == 0) {
            h.x = (std::uint16_t)sign;
            return h;
        }
        e = 0;
    } else {
        shift = 13;
    }
    std::uint32_t half_man = mant >> shift;
    std::uint32_t rest = mant & ((1u << shift) - 1u);
    std::uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half_man & 1u))) {
        ++half_man;  // may carry into the exponent, which is the right result
    }
    if (e == 0) {
        h.x = (std::uint16_t)(sign | half_man);
    } else {
        h.x = (std::uint16_t)(sign | (((std::uint32_t)e << 10) + (half_man - 0x400u)));
    }
    return h;
}

inline float __half2float(__half h)
{
    std::uint32_t sign = (std::uint32_t)(h.x & 0x8000u) << 16;
    std::uint32_t exp = (h.x >> 10) & 0x1fu;
    std::uint32_t man = h.x & 0x3ffu;
    std::uint32_t u;
    if (exp == 0x1fu) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do {
                man <<= 1;
                ++e;
            } while (!(man & 0x400u));
            u = sign | ((std::uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else {
        u = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
