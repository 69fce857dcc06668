// simd: vector helpers shared by the kernels that have an AVX2 path (nn.c, oracle.c).  Each caller
// tests __builtin_cpu_supports("avx2") before it calls one, and keeps a scalar path beside it.
#ifndef BP_SIMD_H
#define BP_SIMD_H

#include <stddef.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define BP_SIMD_AVX2 1
#include <immintrin.h>

// dst[c * ldd + r] = src[r][c] for r, c < 8: an 8 x 8 transpose in registers.  The lanes are only
// moved, never computed on, so 32-bit integers go through as floats bit for bit.
__attribute__((target("avx2"))) static inline void bp_transpose8_avx2(const float *const src[8], float *dst,
                                                                     size_t ldd) {
    const __m256 r0 = _mm256_loadu_ps(src[0]), r1 = _mm256_loadu_ps(src[1]), r2 = _mm256_loadu_ps(src[2]),
                 r3 = _mm256_loadu_ps(src[3]), r4 = _mm256_loadu_ps(src[4]), r5 = _mm256_loadu_ps(src[5]),
                 r6 = _mm256_loadu_ps(src[6]), r7 = _mm256_loadu_ps(src[7]);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
                 t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
                 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
                 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
                 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
                 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(dst + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#else
#define BP_SIMD_AVX2 0
#endif

#endif
