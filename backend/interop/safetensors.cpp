#include "backend/interop/safetensors.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/precision.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <set>

namespace mwb::interop {

namespace {

constexpr uint64_t kMaxHeader = 100'000'000;  // the reference implementation's limit

struct DtypeInfo {
    StDtype dtype;
    const char* name;
    std::size_t size;
};
constexpr std::array<DtypeInfo, 15> kDtypes = {{{StDtype::BOOL, "BOOL", 1},
                                                 {StDtype::U8, "U8", 1},
                                                 {StDtype::I8, "I8", 1},
                                                 {StDtype::F8_E5M2, "F8_E5M2", 1},
                                                 {StDtype::F8_E4M3, "F8_E4M3", 1},
                                                 {StDtype::I16, "I16", 2},
                                                 {StDtype::U16, "U16", 2},
                                                 {StDtype::F16, "F16", 2},
                                                 {StDtype::BF16, "BF16", 2},
                                                 {StDtype::I32, "I32", 4},
                                                 {StDtype::U32, "U32", 4},
                                                 {StDtype::F32, "F32", 4},
                                                 {StDtype::F64, "F64", 8},
                                                 {StDtype::I64, "I64", 8},
                                                 {StDtype::U64, "U64", 8}}};

const DtypeInfo& info(StDtype d) {
    return kDtypes[static_cast<std::size_t>(d)];
}

template <typename T>
T load(const unsigned char* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

}  // namespace

const char* dtype_name(StDtype d) {
    return info(d).name;
}
std::size_t dtype_size(StDtype d) {
    return info(d).size;
}

int64_t StTensor::numel() const {
    int64_t n = 1;
    for (const int64_t s : shape) n *= s;
    return n;
}

SafetensorsFile::SafetensorsFile(const fs::path& path) : file_(path) {
    const std::string where = path.string();
    const std::size_t size = file_.size();
    MWB_CHECK(size >= 8, "{}: truncated safetensors file ({} bytes; the 8-byte header length is missing)", where,
              size);
    const auto n = file_.load<uint64_t>(0);
    MWB_CHECK(n >= 2 && n <= kMaxHeader, "{}: safetensors header length {} is outside [2, {}] bytes", where, n,
              kMaxHeader);
    MWB_CHECK(8 + n <= size, "{}: truncated safetensors file: the header needs {} bytes, the file has {}", where,
              8 + n, size);
    const std::string_view text(reinterpret_cast<const char*>(file_.data() + 8), n);
    MWB_CHECK(text.front() == '{', "{}: the safetensors header does not start with '{{'", where);
    // Duplicate keys would silently replace each other in the JSON object: refuse them.
    std::set<std::string> keys;
    std::string duplicate;
    nlohmann::json header;
    try {
        header = nlohmann::json::parse(text, [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
            if (depth == 1 && event == nlohmann::json::parse_event_t::key && !keys.insert(parsed.get<std::string>()).second)
                duplicate = parsed.get<std::string>();
            return true;
        });
    } catch (const nlohmann::json::exception& e) {
        MWB_FAIL("{}: the safetensors header is not valid JSON ({})", where, e.what());
    }
    MWB_CHECK(duplicate.empty(), "{}: tensor '{}' appears twice in the header", where, duplicate);
    MWB_CHECK(header.is_object(), "{}: the safetensors header is not a JSON object", where);
    const uint64_t data_size = size - 8 - n;
    const unsigned char* data = file_.data() + 8 + n;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const auto& [name, e] : header.items()) {
        if (name == "__metadata__") {
            MWB_CHECK(e.is_object(), "{}: __metadata__ must be an object of strings", where);
            for (const auto& [k, v] : e.items()) {
                MWB_CHECK(v.is_string(), "{}: __metadata__ '{}' is not a string", where, k);
                metadata_[k] = v.get<std::string>();
            }
            continue;
        }
        const auto bad = [&](const std::string& what) {
            MWB_FAIL("{}: tensor '{}': {}", where, name, what);
        };
        if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
            bad("expected an object with dtype, shape and data_offsets");
        StTensor t;
        t.name = name;
        if (!e["dtype"].is_string()) bad("dtype is not a string");
        const std::string dt = e["dtype"].get<std::string>();
        const auto it = std::find_if(kDtypes.begin(), kDtypes.end(), [&](const DtypeInfo& d) { return dt == d.name; });
        if (it == kDtypes.end()) bad(fmt::format("unknown dtype '{}'", dt));
        t.dtype = it->dtype;
        if (!e["shape"].is_array()) bad("shape is not an array");
        uint64_t numel = 1;  // at most 2^60 elements, so numel x 8 bytes cannot overflow
        for (const auto& d : e["shape"]) {
            if (!d.is_number_unsigned()) bad(fmt::format("shape {} has a dimension that is not a non-negative integer",
                                                         e["shape"].dump()));
            const uint64_t v = d.get<uint64_t>();
            t.shape.push_back(static_cast<int64_t>(std::min<uint64_t>(v, uint64_t{1} << 62)));
            if (v != 0 && numel > (uint64_t{1} << 60) / v)
                bad(fmt::format("shape {} has more than 2^60 elements", e["shape"].dump()));
            numel *= v;
        }
        const auto& off = e["data_offsets"];
        if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
            bad("data_offsets must be [begin, end], two non-negative integers");
        const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
        if (begin > end) bad(fmt::format("data_offsets [{}, {}] end before they begin", begin, end));
        if (end > data_size)
            bad(fmt::format("data_offsets [{}, {}] reach past the end of the data ({} bytes; truncated file?)", begin,
                            end, data_size));
        const uint64_t need = numel * info(t.dtype).size;
        if (need != end - begin)
            bad(fmt::format("shape {} of {} needs {} bytes, data_offsets [{}, {}] hold {}", e["shape"].dump(), dt,
                            need, begin, end, end - begin));
        t.data = data + begin;
        t.bytes = end - begin;
        tensors_.push_back(std::move(t));
        ranges.emplace_back(begin, end);
    }
    // The tensors tile the data: sorted by offset, each begins where the previous ends.
    std::vector<std::size_t> order(tensors_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ranges[a] < ranges[b]; });
    uint64_t at = 0;
    for (const std::size_t i : order) {
        MWB_CHECK(ranges[i].first == at,
                  "{}: tensor '{}': data_offsets [{}, {}] {} the previous tensor's end at {} (the data must be "
                  "covered without overlap or gap)",
                  where, tensors_[i].name, ranges[i].first, ranges[i].second,
                  ranges[i].first < at ? "overlap" : "leave a gap after", at);
        at = ranges[i].second;
    }
    MWB_CHECK(at == data_size, "{}: the tensors cover {} bytes of data but the file holds {} after the header", where,
              at, data_size);
    std::vector<StTensor> sorted;
    sorted.reserve(tensors_.size());
    for (const std::size_t i : order) sorted.push_back(std::move(tensors_[i]));
    tensors_ = std::move(sorted);
}

const StTensor* SafetensorsFile::find(std::string_view name) const {
    for (const StTensor& t : tensors_)
        if (t.name == name) return &t;
    return nullptr;
}

void SafetensorsFile::read_f32(const StTensor& t, std::span<float> out) const {
    const auto n = static_cast<std::size_t>(t.numel());
    MWB_CHECK(out.size() == n, "{}: tensor '{}': {} values, the destination holds {}", path().string(), t.name, n,
              out.size());
    const unsigned char* p = t.data;
    switch (t.dtype) {
    case StDtype::F32: std::memcpy(out.data(), p, n * 4); return;
    case StDtype::F16:
        for (std::size_t i = 0; i < n; ++i) out[i] = from_fp16_bits(load<uint16_t>(p + 2 * i));
        return;
    case StDtype::BF16:
        for (std::size_t i = 0; i < n; ++i)
            out[i] = from_bf16_bits(load<uint16_t>(p + 2 * i));
        return;
    case StDtype::F64:
        for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<double>(p + 8 * i));
        return;
    case StDtype::I64:
        for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<int64_t>(p + 8 * i));
        return;
    case StDtype::I32:
        for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<int32_t>(p + 4 * i));
        return;
    case StDtype::U8:
    case StDtype::BOOL:
        for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
        return;
    default: break;
    }
    MWB_FAIL("{}: tensor '{}': dtype {} cannot be read as float32 (F32, F16, BF16, F64, I64, I32, U8, BOOL)",
             path().string(), t.name, dtype_name(t.dtype));
}

void encode_f32(std::span<const float> values, StDtype dtype, std::vector<unsigned char>& out) {
    const std::size_t at = out.size();
    out.resize(at + values.size() * dtype_size(dtype));
    unsigned char* p = out.data() + at;
    switch (dtype) {
    case StDtype::F32: std::memcpy(p, values.data(), values.size() * 4); return;
    case StDtype::BF16:
        for (std::size_t i = 0; i < values.size(); ++i) {
            const uint16_t v = bf16_bits(values[i]);
            std::memcpy(p + 2 * i, &v, 2);
        }
        return;
    case StDtype::F16:
        for (std::size_t i = 0; i < values.size(); ++i) {
            const uint16_t v = fp16_bits(values[i]);
            std::memcpy(p + 2 * i, &v, 2);
        }
        return;
    default: break;
    }
    MWB_FAIL("safetensors: writing float32 values as {} is not supported (F32, F16, BF16)", dtype_name(dtype));
}

void write_safetensors(const fs::path& path, const std::vector<StWriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    uint64_t offset = 0;
    for (const StWriteTensor& t : tensors) {
        MWB_CHECK(!t.name.empty() && t.name != "__metadata__" && !header.contains(t.name),
                  "{}: tensor name '{}' is empty, reserved or repeated", path.string(), t.name);
        uint64_t numel = 1;
        for (const int64_t d : t.shape) {
            MWB_CHECK(d >= 0, "{}: tensor '{}' has a negative dimension", path.string(), t.name);
            numel *= static_cast<uint64_t>(d);
        }
        MWB_CHECK(numel * dtype_size(t.dtype) == t.bytes.size(), "{}: tensor '{}': shape needs {} bytes of {}, got {}",
                  path.string(), t.name, numel * dtype_size(t.dtype), dtype_name(t.dtype), t.bytes.size());
        header[t.name] = {{"dtype", dtype_name(t.dtype)},
                          {"shape", t.shape},
                          {"data_offsets", {offset, offset + t.bytes.size()}}};
        offset += t.bytes.size();
    }
    std::string text = header.dump();
    text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // the data starts 8-byte aligned
    const uint64_t n = text.size(), total = 8 + n + offset;

    const fs::path tmp = path.string() + fmt::format(".tmp.{}", ::getpid());
    const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    MWB_CHECK(fd >= 0, "{}: cannot create: {}", tmp.string(), std::strerror(errno));
    void* map = MAP_FAILED;
    const auto fail = [&](const char* what) {
        const int err = errno;
        if (map != MAP_FAILED) ::munmap(map, total);
        ::close(fd);
        std::error_code ec;
        fs::remove(tmp, ec);
        MWB_FAIL("{}: {} failed: {}", tmp.string(), what, std::strerror(err));
    };
    if (::ftruncate(fd, static_cast<off_t>(total)) != 0) fail("ftruncate");
    map = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) fail("mmap");
    auto* out = static_cast<unsigned char*>(map);
    std::memcpy(out, &n, 8);
    std::memcpy(out + 8, text.data(), n);
    unsigned char* data = out + 8 + n;
    for (const StWriteTensor& t : tensors) {
        if (!t.bytes.empty()) std::memcpy(data, t.bytes.data(), t.bytes.size());
        data += t.bytes.size();
    }
    if (::msync(map, total, MS_SYNC) != 0) fail("msync");
    ::munmap(map, total);
    map = MAP_FAILED;
    if (::fsync(fd) != 0) fail("fsync");
    ::close(fd);
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) {
        fs::remove(tmp, ec);
        MWB_FAIL("{}: cannot rename into place: {}", path.string(), ec.message());
    }
    sync_directory(path.parent_path().empty() ? fs::path(".") : path.parent_path());
}

std::vector<fs::path> write_safetensors_model(const fs::path& dir, const std::vector<StWriteTensor>& tensors,
                                              uint64_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
    MWB_CHECK(max_shard_bytes > 0, "{}: the shard size must be positive", dir.string());
    std::vector<std::vector<StWriteTensor>> shards(1);
    uint64_t in_shard = 0, total = 0;
    for (const StWriteTensor& t : tensors) {
        if (!shards.back().empty() && in_shard + t.bytes.size() > max_shard_bytes) {
            shards.emplace_back();
            in_shard = 0;
        }
        shards.back().push_back(t);
        in_shard += t.bytes.size();
        total += t.bytes.size();
    }
    fs::create_directories(dir);
    const fs::path index = dir / "model.safetensors.index.json";
    std::vector<fs::path> written;
    if (shards.size() == 1) {
        write_safetensors(dir / "model.safetensors", shards[0], metadata);
        written.push_back(dir / "model.safetensors");
    } else {
        nlohmann::ordered_json map = nlohmann::ordered_json::object();
        for (std::size_t i = 0; i < shards.size(); ++i) {
            const std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
            write_safetensors(dir / name, shards[i], metadata);
            written.push_back(dir / name);
            for (const StWriteTensor& t : shards[i]) map[t.name] = name;
        }
        nlohmann::ordered_json j = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
        write_file_atomic(index, j.dump(2) + "\n");
        written.push_back(index);
    }
    // A reader must not find the weights of an earlier export beside these (Hugging Face prefers
    // model.safetensors over an index).
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string f = e.path().filename().string();
        const bool weights = f == "model.safetensors" || f == "model.safetensors.index.json" ||
                             (f.starts_with("model-") && f.ends_with(".safetensors") && f.find("-of-") != std::string::npos);
        if (weights && std::find(written.begin(), written.end(), e.path()) == written.end()) fs::remove(e.path(), ec);
    }
    return written;
}

uint64_t parse_byte_size(std::string_view text) {
    std::size_t digits = 0;
    while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) ++digits;
    const std::string number(text.substr(0, digits)), unit(text.substr(digits));
    static const std::pair<const char*, double> kUnits[] = {{"", 1},      {"B", 1},          {"KB", 1e3},
                                                            {"MB", 1e6},  {"GB", 1e9},       {"TB", 1e12},
                                                            {"KiB", 1024}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
    double value = 0;
    try {
        std::size_t used = 0;
        value = number.empty() ? -1 : std::stod(number, &used);
        if (used != number.size()) value = -1;
    } catch (const std::exception&) {
        value = -1;
    }
    for (const auto& [name, scale] : kUnits)
        if (unit == name && value > 0 && value * scale >= 1 && value * scale < 1e18)
            return static_cast<uint64_t>(value * scale);
    MWB_FAIL("size '{}': expected a positive number of bytes with an optional unit (e.g. 5GB, 500MB, 2GiB)", text);
}

SafetensorsModel::SafetensorsModel(const fs::path& dir) : dir_(dir) {
    const fs::path index = dir / "model.safetensors.index.json", single = dir / "model.safetensors";
    std::error_code ec;
    if (fs::is_regular_file(index, ec)) {
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(read_file(index, std::size_t{64} << 20));
        } catch (const nlohmann::json::exception& e) {
            MWB_FAIL("{}: not valid JSON ({})", index.string(), e.what());
        }
        MWB_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
                  "{}: expected an object with a \"weight_map\" of tensor name -> shard file", index.string());
        std::map<std::string, const SafetensorsFile*> shards;
        for (const auto& [name, file] : j["weight_map"].items()) {
            MWB_CHECK(file.is_string(), "{}: weight_map['{}'] is not a file name", index.string(), name);
            const std::string f = file.get<std::string>();
            MWB_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..",
                      "{}: weight_map['{}'] = '{}' is not a file name in the directory", index.string(), name, f);
            auto it = shards.find(f);
            if (it == shards.end()) {
                MWB_CHECK(fs::is_regular_file(dir / f, ec), "{}: shard '{}' (of tensor '{}') does not exist",
                          index.string(), f, name);
                files_.push_back(std::make_unique<SafetensorsFile>(dir / f));
                it = shards.emplace(f, files_.back().get()).first;
            }
            const StTensor* t = it->second->find(name);
            MWB_CHECK(t, "{}: tensor '{}' is mapped to {} but that file does not hold it", index.string(), name, f);
            index_[name] = {it->second, t};
        }
        for (const auto& f : files_)
            for (const StTensor& t : f->tensors()) {
                const auto it = index_.find(t.name);
                MWB_CHECK(it != index_.end() && it->second.first == f.get(),
                          "{}: tensor '{}' is in {} but weight_map {}", index.string(), t.name, f->path().filename().string(),
                          it == index_.end() ? "does not list it" : "maps it to another shard");
            }
    } else {
        MWB_CHECK(fs::is_regular_file(single, ec),
                  "{}: no model.safetensors or model.safetensors.index.json (expected a Hugging Face model directory)",
                  dir.string());
        files_.push_back(std::make_unique<SafetensorsFile>(single));
        for (const StTensor& t : files_.back()->tensors()) index_[t.name] = {files_.back().get(), &t};
    }
}

std::vector<std::string> SafetensorsModel::names() const {
    std::vector<std::string> out;
    for (const auto& [name, _] : index_) out.push_back(name);
    return out;
}

bool SafetensorsModel::contains(std::string_view name) const {
    return index_.find(name) != index_.end();
}

const StTensor& SafetensorsModel::get(std::string_view name) const {
    const auto it = index_.find(name);
    MWB_CHECK(it != index_.end(), "{}: the checkpoint has no tensor '{}'", dir_.string(), name);
    return *it->second.second;
}

const SafetensorsFile& SafetensorsModel::file_of(std::string_view name) const {
    get(name);
    return *index_.find(name)->second.first;
}

}  // namespace mwb::interop
