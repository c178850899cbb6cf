#include "checkpoint/checkpoint.h"

#include "mwb/kernels/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fmt/ranges.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <random>

namespace mwb {

namespace {

constexpr const char* kFormat = "mwb-checkpoint";
constexpr int kVersion = 1;
constexpr int64_t kAlign = 64;
constexpr const char* kShardFile = "rank_00000.bin";

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

/// Appends to a file while hashing what is written.
class HashingWriter {
public:
    explicit HashingWriter(const fs::path& path) : path_(path), state_(XXH3_createState()) {
        XXH3_64bits_reset(state_);
        fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        MWB_CHECK(fd_ >= 0, "cannot write checkpoint file '{}': {}", path.string(), std::strerror(errno));
    }
    ~HashingWriter() {
        if (fd_ >= 0) ::close(fd_);
        XXH3_freeState(state_);
    }
    void write(const void* data, int64_t bytes) {
        XXH3_64bits_update(state_, data, static_cast<std::size_t>(bytes));
        const char* p = static_cast<const char*>(data);
        while (bytes > 0) {
            const ssize_t n = ::write(fd_, p, static_cast<std::size_t>(std::min<int64_t>(bytes, 1 << 30)));
            if (n < 0 && errno == EINTR) continue;
            MWB_CHECK(n > 0, "cannot write checkpoint file '{}': {}", path_.string(), std::strerror(errno));
            p += n;
            bytes -= n;
            offset_ += n;
        }
    }
    void pad_to(int64_t alignment) {
        static const char zeros[kAlign] = {};
        if (const int64_t r = offset_ % alignment; r != 0) write(zeros, alignment - r);
    }
    int64_t offset() const { return offset_; }
    uint64_t finish() {
        MWB_CHECK(::fsync(fd_) == 0, "cannot sync checkpoint file '{}': {}", path_.string(), std::strerror(errno));
        ::close(fd_);
        fd_ = -1;
        return XXH3_64bits_digest(state_);
    }

private:
    fs::path path_;
    XXH3_state_t* state_;
    int fd_ = -1;
    int64_t offset_ = 0;
};

/// A read-only memory map of a whole file.
class MappedFile {
public:
    explicit MappedFile(const fs::path& path) : path_(path) {
        fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        MWB_CHECK(fd_ >= 0, "cannot open checkpoint file '{}': {}", path.string(), std::strerror(errno));
        struct stat st {};
        MWB_CHECK(::fstat(fd_, &st) == 0, "cannot stat '{}'", path.string());
        size_ = st.st_size;
        if (size_ > 0) {
            data_ = ::mmap(nullptr, static_cast<std::size_t>(size_), PROT_READ, MAP_PRIVATE, fd_, 0);
            MWB_CHECK(data_ != MAP_FAILED, "cannot map '{}': {}", path.string(), std::strerror(errno));
        }
    }
    ~MappedFile() {
        if (data_ && data_ != MAP_FAILED) ::munmap(data_, static_cast<std::size_t>(size_));
        if (fd_ >= 0) ::close(fd_);
    }
    const char* data() const { return static_cast<const char*>(data_); }
    int64_t size() const { return size_; }

private:
    fs::path path_;
    int fd_ = -1;
    void* data_ = nullptr;
    int64_t size_ = 0;
};

int64_t numel_of(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

}  // namespace

std::string iteration_dir_name(int64_t iteration) { return fmt::format("iter_{:07d}", iteration); }

fs::path save_checkpoint(const fs::path& dir, const CheckpointState& state, const std::vector<CheckpointTensor>& tensors) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    MWB_CHECK(!ec, "cannot create checkpoint directory '{}': {}", dir.string(), ec.message());
    const std::string name = iteration_dir_name(state.iteration);
    const fs::path tmp = dir / fmt::format(".{}.tmp-{:x}", name, std::random_device{}());
    fs::create_directories(tmp, ec);
    MWB_CHECK(!ec, "cannot create '{}': {}", tmp.string(), ec.message());
    try {
        nlohmann::json entries = nlohmann::json::array();
        HashingWriter shard(tmp / kShardFile);
        for (const CheckpointTensor& t : tensors) {
            shard.pad_to(kAlign);
            const int64_t bytes = numel_of(t.shape) * static_cast<int64_t>(sizeof(float));
            entries.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", "f32"}, {"file", kShardFile},
                               {"offset", shard.offset()}, {"bytes", bytes}});
            shard.write(t.data, bytes);
        }
        const int64_t shard_bytes = shard.offset();
        const uint64_t shard_hash = shard.finish();
        const nlohmann::json meta = {
            {"format", kFormat},
            {"version", kVersion},
            {"iteration", state.iteration},
            {"consumed_samples", state.consumed_samples},
            {"optimizer_steps", state.optimizer_steps},
            {"skipped_iterations", state.skipped_iterations},
            {"loss_scaler", state.loss_scaler},
            {"layout", {{"tensor_model_parallel_size", 1}, {"pipeline_model_parallel_size", 1}, {"data_parallel_size", 1}}},
            {"files", nlohmann::json::array({{{"name", kShardFile}, {"bytes", shard_bytes}, {"xxh3_64", hex64(shard_hash)}}})},
            {"tensors", entries},
            {"config", state.config},
        };
        write_file_atomic(tmp / "metadata.json", meta.dump(1));
        sync_directory(tmp);

        // Swap the finished folder into place; an older checkpoint of the same iteration goes first.
        const fs::path final_dir = dir / name;
        if (fs::exists(final_dir)) {
            const fs::path old = dir / fmt::format(".{}.old-{:x}", name, std::random_device{}());
            fs::rename(final_dir, old);
            fs::rename(tmp, final_dir);
            fs::remove_all(old, ec);
        } else {
            fs::rename(tmp, final_dir);
        }
        sync_directory(dir);
        write_file_atomic(dir / "latest", name + "\n");
        return final_dir;
    } catch (...) {
        fs::remove_all(tmp, ec);
        throw;
    }
}

fs::path resolve_checkpoint_dir(const fs::path& load) {
    MWB_CHECK(fs::exists(load), "load: checkpoint path '{}' does not exist", load.string());
    if (fs::exists(load / "metadata.json")) return load;
    const fs::path marker = load / "latest";
    MWB_CHECK(fs::exists(marker), "load: '{}' holds neither metadata.json nor a 'latest' marker", load.string());
    std::string name = read_file(marker, 256);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    MWB_CHECK(name.starts_with("iter_") && name.find('/') == std::string::npos,
              "load: '{}' names '{}', expected iter_NNNNNNN", marker.string(), name);
    const fs::path dir = load / name;
    MWB_CHECK(fs::exists(dir / "metadata.json"), "load: '{}' points to '{}', which has no metadata.json",
              marker.string(), dir.string());
    return dir;
}

CheckpointState load_checkpoint(const fs::path& iteration_dir, const std::vector<CheckpointTensor>& tensors) {
    const fs::path meta_path = iteration_dir / "metadata.json";
    nlohmann::json meta;
    try {
        meta = nlohmann::json::parse(read_file(meta_path, 64 << 20));
    } catch (const nlohmann::json::exception& e) {
        MWB_FAIL("checkpoint metadata '{}' is not valid JSON: {}", meta_path.string(), e.what());
    }
    try {
        MWB_CHECK(meta.value("format", "") == kFormat, "'{}' is not an mwb checkpoint (format \"{}\")", meta_path.string(),
                  meta.value("format", ""));
        MWB_CHECK(meta.at("version").get<int>() == kVersion, "'{}' has checkpoint version {}, this build reads {}",
                  meta_path.string(), meta.at("version").get<int>(), kVersion);

        // Verify every file before trusting any byte of it.
        std::map<std::string, std::unique_ptr<MappedFile>> files;
        for (const auto& f : meta.at("files")) {
            const std::string name = f.at("name").get<std::string>();
            MWB_CHECK(name.find('/') == std::string::npos && !name.starts_with("."), "'{}' names an invalid file '{}'",
                      meta_path.string(), name);
            const fs::path path = iteration_dir / name;
            auto mapped = std::make_unique<MappedFile>(path);
            const int64_t expected = f.at("bytes").get<int64_t>();
            MWB_CHECK(mapped->size() == expected, "checkpoint file '{}' is {} bytes, metadata.json records {} (truncated?)",
                      path.string(), mapped->size(), expected);
            const std::string hash = hex64(XXH3_64bits(mapped->data(), static_cast<std::size_t>(mapped->size())));
            MWB_CHECK(hash == f.at("xxh3_64").get<std::string>(),
                      "checkpoint file '{}' is corrupt: its XXH3-64 is {}, metadata.json records {}", path.string(), hash,
                      f.at("xxh3_64").get<std::string>());
            files.emplace(name, std::move(mapped));
        }

        std::map<std::string, nlohmann::json> entries;
        for (const auto& e : meta.at("tensors")) entries.emplace(e.at("name").get<std::string>(), e);
        for (const CheckpointTensor& t : tensors) {
            const auto it = entries.find(t.name);
            MWB_CHECK(it != entries.end(), "checkpoint '{}' has no tensor {} (was it saved by a different model?)",
                      iteration_dir.string(), t.name);
            const auto& e = it->second;
            const auto shape = e.at("shape").get<std::vector<int64_t>>();
            MWB_CHECK(shape == t.shape, "checkpoint '{}': {} has shape [{}], this model needs [{}]", iteration_dir.string(),
                      t.name, fmt::join(shape, ", "), fmt::join(t.shape, ", "));
            const auto file = files.find(e.at("file").get<std::string>());
            MWB_CHECK(file != files.end(), "checkpoint '{}': {} lives in an unlisted file", iteration_dir.string(), t.name);
            const int64_t offset = e.at("offset").get<int64_t>(), bytes = e.at("bytes").get<int64_t>();
            MWB_CHECK(bytes == numel_of(t.shape) * 4 && offset >= 0 && offset + bytes <= file->second->size(),
                      "checkpoint '{}': {} lies outside its file", iteration_dir.string(), t.name);
            std::memcpy(t.dest, file->second->data() + offset, static_cast<std::size_t>(bytes));
            entries.erase(it);
        }
        MWB_CHECK(entries.empty(), "checkpoint '{}' holds {} tensors this model does not have, e.g. {}",
                  iteration_dir.string(), entries.size(), entries.empty() ? "" : entries.begin()->first);

        CheckpointState s;
        s.iteration = meta.at("iteration").get<int64_t>();
        s.consumed_samples = meta.at("consumed_samples").get<int64_t>();
        s.optimizer_steps = meta.at("optimizer_steps").get<int64_t>();
        s.skipped_iterations = meta.value("skipped_iterations", int64_t{0});
        s.loss_scaler = meta.at("loss_scaler");
        s.config = meta.value("config", nlohmann::json::object());
        return s;
    } catch (const nlohmann::json::exception& e) {
        MWB_FAIL("checkpoint metadata '{}' is missing or mistypes a field: {}", meta_path.string(), e.what());
    }
}

}  // namespace mwb
