#pragma once
// numpy.random.RandomState(seed).shuffle, reproduced exactly: Megatron-LM shuffles its document and
// sample indices with it, so the same seed gives the same sample order here as there. RandomState
// seeds MT19937 with init_genrand(seed) (as std::mt19937 does) and shuffles by Fisher-Yates from the
// back, drawing j in [0, i] by masked rejection sampling (numpy's random_interval).
#include <cstdint>
#include <random>
#include <span>
#include <utility>

namespace mwb::data {

class NumpyRandomState {
public:
    explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}

    /// numpy's random_interval(max): uniform in [0, max].
    uint64_t interval(uint64_t max) {
        if (max == 0) return 0;
        uint64_t mask = max;
        mask |= mask >> 1;
        mask |= mask >> 2;
        mask |= mask >> 4;
        mask |= mask >> 8;
        mask |= mask >> 16;
        mask |= mask >> 32;
        uint64_t value;
        if (max <= 0xffffffffull) {
            while ((value = (static_cast<uint64_t>(mt_()) & mask)) > max) {
            }
        } else {
            while ((value = (next_u64() & mask)) > max) {
            }
        }
        return value;
    }

    /// RandomState.shuffle of a 1-D array.
    template <typename T>
    void shuffle(std::span<T> x) {
        for (std::size_t i = x.size(); i-- > 1;) std::swap(x[i], x[static_cast<std::size_t>(interval(i))]);
    }

private:
    uint64_t next_u64() {
        const uint64_t hi = mt_();
        return (hi << 32) | mt_();
    }
    std::mt19937 mt_;
};

}  // namespace mwb::data
