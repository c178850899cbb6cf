#pragma once
// Philox4x32-10 (Salmon et al., SC'11): a counter-based RNG. A dropout mask element is a pure function
// of (seed, stream, element index), so masks are regenerated in backward instead of stored, recompute
// reproduces them exactly, and a sharded tensor draws the same mask as the whole one (indices are global).
#include <cstdint>

#if defined(__CUDACC__)
#define MWB_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MWB_HOST_DEVICE inline
#endif

namespace mwb {

/// splitmix64: a bijective 64-bit mix used to derive stream ids.
MWB_HOST_DEVICE uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/// Stream base of one (global) micro-batch of one iteration (iterations count from 1).
MWB_HOST_DEVICE uint64_t micro_batch_stream(int64_t iteration, int64_t micro_batch) {
    return mix64(mix64(static_cast<uint64_t>(iteration)) ^ static_cast<uint64_t>(micro_batch));
}

/// The stream of one dropout site (`site_key`: the model's layer · 8 + site) of a micro-batch's stream base.
MWB_HOST_DEVICE uint64_t site_stream(uint64_t stream_base, uint64_t site_key) {
    return mix64(stream_base ^ mix64(site_key));
}

/// Names one independent random stream: the run's seed plus a stream id that the model derives from
/// (iteration, micro-batch, layer, site). Two forms: `stream` given (iteration null), or derived where
/// it is used from a step value in memory the op reads (`iteration`: a double holding the iteration,
/// the step block's step_params::Iteration, device memory on a GPU) and the host-known `micro_batch`
/// and `site_key`, so that a step queued once (a CUDA graph) draws each iteration's masks. Ops take
/// either and draw from resolved(): the same stream for the same (iteration, micro-batch, site).
struct RngStream {
    uint64_t seed = 0;
    uint64_t stream = 0;                // the stream id (when `iteration` is null)
    const double* iteration = nullptr;  // else: the iteration to derive it from, read by the op
    int64_t micro_batch = 0;            // the global micro-batch (with `iteration`)
    uint64_t site_key = 0;              // layer · 8 + site (with `iteration`)
};

/// The stream with its id derived (reads *s.iteration when set; on a GPU from device code only).
MWB_HOST_DEVICE RngStream resolved(RngStream s) {
    if (s.iteration) {
        s.stream = site_stream(micro_batch_stream(static_cast<int64_t>(*s.iteration), s.micro_batch), s.site_key);
        s.iteration = nullptr;
    }
    return s;
}

struct Philox4 {
    uint32_t v[4];
};

MWB_HOST_DEVICE uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
    const uint64_t p = static_cast<uint64_t>(a) * b;
    *hi = static_cast<uint32_t>(p >> 32);
    return static_cast<uint32_t>(p);
}

MWB_HOST_DEVICE Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
    constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
    for (int round = 0; round < 10; ++round) {
        uint32_t hi0, hi1;
        const uint32_t lo0 = philox_mulhilo(M0, c0, &hi0);
        const uint32_t lo1 = philox_mulhilo(M1, c2, &hi1);
        const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
        k0 += W0; k1 += W1;
    }
    return Philox4{{c0, c1, c2, c3}};
}

/// Four uniform 32-bit draws for elements [4·group, 4·group + 4) of a stream.
MWB_HOST_DEVICE Philox4 philox_draw(const RngStream& s, uint64_t group) {
    return philox4x32_10(static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32),
                         static_cast<uint32_t>(s.stream), static_cast<uint32_t>(s.stream >> 32),
                         static_cast<uint32_t>(s.seed), static_cast<uint32_t>(s.seed >> 32));
}

/// Threshold such that an element is kept when its draw is below it: P(keep) = 1 - p.
MWB_HOST_DEVICE uint32_t dropout_keep_threshold(float p) {
    const double keep = 1.0 - static_cast<double>(p);
    return keep >= 1.0 ? 0xFFFFFFFFu : static_cast<uint32_t>(keep * 4294967296.0);
}

/// Whether global element `index` of stream `s` survives dropout with keep threshold `threshold`.
MWB_HOST_DEVICE bool dropout_keep(const RngStream& s, uint64_t index, uint32_t threshold) {
    return philox_draw(s, index >> 2).v[index & 3] < threshold;
}

}  // namespace mwb
