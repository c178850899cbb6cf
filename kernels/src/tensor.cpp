#include "mwb/kernels/tensor.h"

#include "mwb/kernels/error.h"

namespace mwb {

std::size_t dtype_size(DType t) {
    switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::F64: return 8;
    }
    return 0;
}

const char* dtype_name(DType t) {
    switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::F64: return "f64";
    }
    return "?";
}

const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

int64_t TensorView::numel() const {
    if (ndim == 0) return 0;
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
}

float* TensorView::f32() const {
    MWB_CHECK(dtype == DType::F32, "expected an f32 tensor, got {}", describe());
    return static_cast<float*>(data);
}

int32_t* TensorView::i32() const {
    MWB_CHECK(dtype == DType::I32, "expected an i32 tensor, got {}", describe());
    return static_cast<int32_t*>(data);
}

double* TensorView::f64() const {
    MWB_CHECK(dtype == DType::F64, "expected an f64 tensor, got {}", describe());
    return static_cast<double*>(data);
}

std::string TensorView::describe() const {
    if (empty()) return "<empty>";
    std::string s = fmt::format("{}[", dtype_name(dtype));
    for (int i = 0; i < ndim; ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
    return s + fmt::format("]@{}", device_name(device));
}

TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device) {
    MWB_CHECK(shape.size() >= 1 && shape.size() <= static_cast<std::size_t>(kMaxDims),
              "tensor views have 1 to {} dimensions, got {}", kMaxDims, shape.size());
    TensorView v;
    v.data = data;
    v.dtype = dtype;
    v.device = device;
    v.ndim = static_cast<int>(shape.size());
    int i = 0;
    for (int64_t d : shape) {
        MWB_CHECK(d >= 0, "negative dimension {} in a tensor shape", d);
        v.shape[i++] = d;
    }
    return v;
}

TensorView slice_1d(const TensorView& v, int64_t offset, int64_t count) {
    MWB_CHECK(offset >= 0 && count >= 0 && offset + count <= v.numel(), "slice [{}, {}) outside {}", offset,
              offset + count, v.describe());
    return make_view(static_cast<char*>(v.data) + offset * static_cast<int64_t>(dtype_size(v.dtype)), v.dtype, {count},
                     v.device);
}

TensorView reshaped(const TensorView& v, std::initializer_list<int64_t> shape) {
    TensorView r = make_view(v.data, v.dtype, shape, v.device);
    MWB_CHECK(r.numel() == v.numel(), "cannot reshape {} to {}", v.describe(), r.describe());
    return r;
}

bool same_shape(const TensorView& a, const TensorView& b) {
    if (a.ndim != b.ndim) return false;
    for (int i = 0; i < a.ndim; ++i)
        if (a.shape[i] != b.shape[i]) return false;
    return true;
}

}  // namespace mwb
