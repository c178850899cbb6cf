#pragma once
// Non-owning views of dense row-major tensors. Ops take views; ownership lives in the backend's
// tracked buffers (CPU) or device allocator (CUDA), so the same op signatures serve both devices.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace mwb {

/// Storage type of a tensor's elements. On the CPU, 16-bit storage is emulated: the buffer holds
/// float32 values rounded to BF16/F16 (see precision.h), so views of such buffers are F32. F64 holds
/// the few device scalars that accumulate in float64 (the gradient norm's Σ x²); no other op reads it.
enum class DType : uint8_t { F32, BF16, F16, I32, F64 };
enum class Device : uint8_t { CPU, CUDA };

std::size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* device_name(Device d);

inline constexpr int kMaxDims = 4;

struct TensorView {
    void* data = nullptr;
    DType dtype = DType::F32;
    Device device = Device::CPU;
    int ndim = 0;
    int64_t shape[kMaxDims] = {};

    bool empty() const { return data == nullptr; }
    int64_t numel() const;
    int64_t dim(int i) const { return shape[i]; }
    /// Rows of the tensor seen as a matrix (all but the last dimension) and its row length.
    int64_t rows() const { return ndim == 0 ? 0 : numel() / shape[ndim - 1]; }
    int64_t cols() const { return ndim == 0 ? 0 : shape[ndim - 1]; }
    float* f32() const;
    int32_t* i32() const;
    double* f64() const;
    /// "f32[4, 256]@cpu" for error messages.
    std::string describe() const;
};

TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device = Device::CPU);
inline TensorView view_f32(float* data, std::initializer_list<int64_t> shape, Device device = Device::CPU) {
    return make_view(data, DType::F32, shape, device);
}
inline TensorView view_i32(int32_t* data, std::initializer_list<int64_t> shape, Device device = Device::CPU) {
    return make_view(data, DType::I32, shape, device);
}
/// Elements [offset, offset + count) of v's memory as a 1-D view of the same dtype and device.
TensorView slice_1d(const TensorView& v, int64_t offset, int64_t count);
/// The same memory seen with another shape of the same element count.
TensorView reshaped(const TensorView& v, std::initializer_list<int64_t> shape);

bool same_shape(const TensorView& a, const TensorView& b);

}  // namespace mwb
