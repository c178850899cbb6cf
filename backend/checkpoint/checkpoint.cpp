#include "backend/checkpoint/checkpoint.h"

#include "backend/core/mapped_file.h"
#include "mwb/kernels/error.h"
#include "backend/parallel/communicator.h"
#include "backend/parallel/parallel_context.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

namespace mwb {

namespace {

constexpr const char* kFormat = "mwb-checkpoint";
constexpr int kVersion = 1;
constexpr int64_t kAlign = 64;

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

int64_t numel_of(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

/// The rectangle [row0, row1) x [col0, col1) a slice covers in its 2-D global tensor (1-D: one row).
struct Rect {
    int64_t row0, row1, col0, col1;
};

Rect rect_of(const std::vector<int64_t>& global, const std::vector<int64_t>& shape, int split_dim, int64_t begin) {
    const int64_t rows = global.size() == 2 ? global[0] : 1, cols = global.back();
    Rect r{0, rows, 0, cols};
    if (split_dim < 0) return r;
    if (global.size() == 1 || split_dim == 1) {
        r.col0 = begin;
        r.col1 = begin + shape.back();
    } else {
        r.row0 = begin;
        r.row1 = begin + shape[0];
    }
    return r;
}

std::string part_name(const RankCoordinates& c) { return fmt::format("tp{:02d}_pp{:02d}", c.tp, c.pp); }

/// Test hook: MWB_CRASH_AT=<point> kills the process (SIGKILL, as the OOM killer or a node failure
/// would) when it reaches that point of a save, so tests can check every phase (docs/reliability.md).
void crash_point(const char* point) {
    static const char* const at = std::getenv("MWB_CRASH_AT");
    if (at && std::strcmp(at, point) == 0) std::raise(SIGKILL);
}

/// What interrupted saves leave in `dir`: temporary folders and marker files go; a checkpoint moved
/// aside by an interrupted replacement (".iter_N.old" without "iter_N") is put back.
void clean_interrupted_saves(const fs::path& dir) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.starts_with(".latest.tmp-") || (name.starts_with(".iter_") && name.ends_with(".tmp"))) {
            fs::remove_all(entry.path(), ec);
        } else if (name.starts_with(".iter_") && name.ends_with(".old")) {
            const fs::path original = dir / name.substr(1, name.size() - 5);
            if (fs::exists(original / "metadata.json")) fs::remove_all(entry.path(), ec);
            else if (fs::exists(entry.path() / "metadata.json")) {
                fs::remove_all(original, ec);
                fs::rename(entry.path(), original, ec);
            }
        }
    }
}

/// Puts the finished folder `tmp` at `final_dir`. Over an older checkpoint of the same iteration (which
/// `latest` may name) the two are exchanged atomically where the file system can (renameat2); elsewhere
/// (NFS, Lustre) the old one steps aside first, and find_checkpoint() reads it if the swap is cut short.
void move_into_place(const fs::path& tmp, const fs::path& final_dir, const fs::path& old) {
    if (!fs::exists(final_dir)) {
        fs::rename(tmp, final_dir);
        return;
    }
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
        crash_point("checkpoint.exchanged");
        std::error_code ec;
        fs::remove_all(tmp, ec);  // the old checkpoint now
        return;
    }
    MWB_CHECK(errno == EINVAL || errno == ENOSYS || errno == ENOTSUP, "cannot replace '{}': {}", final_dir.string(),
              std::strerror(errno));
    std::error_code ec;
    fs::remove_all(old, ec);
    fs::rename(final_dir, old);
    crash_point("checkpoint.old_moved");
    fs::rename(tmp, final_dir);
    fs::remove_all(old, ec);
}

}  // namespace

std::string iteration_dir_name(int64_t iteration) { return fmt::format("iter_{:07d}", iteration); }

fs::path save_checkpoint(const fs::path& dir, const CheckpointState& state, const std::vector<CheckpointTensor>& tensors,
                         ParallelContext& par, bool writer) {
    const std::string name = iteration_dir_name(state.iteration);
    const fs::path tmp = dir / ("." + name + ".tmp");  // one name all ranks agree on
    const fs::path final_dir = dir / name;
    const bool leader = par.world_rank() == 0;
    // Each phase ends with every rank learning whether any rank failed: then all fail together and
    // rank 0 removes the partial folder (a full disk on one rank must not leave a .tmp or hang the rest).
    std::string failure;
    const auto attempt = [&failure](auto&& step) {
        try {
            step();
        } catch (const std::exception& e) {
            failure = e.what();
        }
    };
    const auto agree = [&] {
        float failed = failure.empty() ? 0.0f : 1.0f;
        par.world().all_reduce_max(&failed, 1);
        if (failed == 0.0f) return;
        if (leader) {
            std::error_code ec;
            fs::remove_all(tmp, ec);
        }
        MWB_FAIL("checkpoint of iteration {} not saved in '{}': {}", state.iteration, dir.string(),
                 failure.empty() ? std::string("another rank failed to write its part") : failure);
    };

    if (leader)
        attempt([&] {
            std::error_code ec;
            fs::create_directories(dir, ec);
            MWB_CHECK(!ec, "cannot create checkpoint directory '{}': {}", dir.string(), ec.message());
            clean_interrupted_saves(dir);
            fs::create_directories(tmp, ec);
            MWB_CHECK(!ec, "cannot create '{}': {}", tmp.string(), ec.message());
        });
    agree();

    if (writer)
        attempt([&] {
            const std::string part = part_name(par.coord());
            nlohmann::json entries = nlohmann::json::array();
            HashingWriter shard(tmp / (part + ".bin"));
            for (const CheckpointTensor& t : tensors) {
                if (!t.save) continue;
                shard.pad_to(kAlign);
                const int64_t bytes = numel_of(t.shape) * static_cast<int64_t>(sizeof(float));
                entries.push_back({{"name", t.name}, {"global_shape", t.global_shape}, {"shape", t.shape},
                                   {"split_dim", t.split_dim}, {"split_begin", t.split_begin}, {"dtype", "f32"},
                                   {"file", part + ".bin"}, {"offset", shard.offset()}, {"bytes", bytes}});
                shard.write(t.data, bytes);
            }
            const int64_t bytes = shard.offset();
            const uint64_t hash = shard.finish();
            crash_point("checkpoint.shard_written");
            const nlohmann::json part_meta = {
                {"file", {{"name", part + ".bin"}, {"bytes", bytes}, {"xxh3_64", hex64(hash)}}}, {"tensors", entries}};
            write_file_atomic(tmp / (part + ".json"), part_meta.dump());
        });
    agree();

    if (leader)
        attempt([&] {
            nlohmann::json files = nlohmann::json::array(), tensors_meta = nlohmann::json::array();
            for (const auto& entry : fs::directory_iterator(tmp)) {
                if (entry.path().extension() != ".json") continue;
                const auto part = nlohmann::json::parse(read_file(entry.path(), 256 << 20));
                files.push_back(part.at("file"));
                for (const auto& t : part.at("tensors")) tensors_meta.push_back(t);
                fs::remove(entry.path());
            }
            const nlohmann::json meta = {
                {"format", kFormat},
                {"version", kVersion},
                {"iteration", state.iteration},
                {"consumed_samples", state.consumed_samples},
                {"optimizer_steps", state.optimizer_steps},
                {"skipped_iterations", state.skipped_iterations},
                {"scheduler_samples", state.scheduler_samples},
                {"consumed_valid_samples", state.consumed_valid_samples},
                {"loss_scaler", state.loss_scaler},
                {"layout",
                 {{"tensor_model_parallel_size", par.tp_size()},
                  {"pipeline_model_parallel_size", par.pp_size()},
                  {"data_parallel_size", par.dp_size()}}},
                {"files", files},
                {"tensors", tensors_meta},
                {"config", state.config},
            };
            write_file_atomic(tmp / "metadata.json", meta.dump(1));
            sync_directory(tmp);
            crash_point("checkpoint.metadata_written");
            move_into_place(tmp, final_dir, dir / ("." + name + ".old"));
            sync_directory(dir);
            crash_point("checkpoint.renamed");
            write_file_atomic(dir / "latest", name + "\n");
            // Megatron-LM's tracker file beside our marker, so its tools find the iteration too.
            write_file_atomic(dir / "latest_checkpointed_iteration.txt", std::to_string(state.iteration));
            crash_point("checkpoint.latest_written");
        });
    agree();
    return final_dir;
}

std::optional<fs::path> find_checkpoint(const fs::path& load) {
    if (fs::exists(load / "metadata.json")) return load;
    MWB_CHECK(!load.filename().string().starts_with("iter_"), "load: '{}' is not a checkpoint (it has no metadata.json)",
              load.string());
    MWB_CHECK(!fs::exists(load) || fs::is_directory(load), "load: '{}' is not a directory", load.string());
    const fs::path marker = load / "latest";
    if (!fs::exists(marker)) return std::nullopt;  // nothing saved there yet
    std::string name = read_file(marker, 256);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    MWB_CHECK(name.starts_with("iter_") && name.find('/') == std::string::npos,
              "load: '{}' names '{}', expected iter_NNNNNNN", marker.string(), name);
    const fs::path dir = load / name;
    if (fs::exists(dir / "metadata.json")) return dir;
    // Killed while replacing it on a file system without an atomic exchange: the old one stepped aside.
    if (const fs::path old = load / ("." + name + ".old"); fs::exists(old / "metadata.json")) return old;
    MWB_FAIL("load: '{}' points to '{}', which has no metadata.json", marker.string(), dir.string());
}

fs::path resolve_checkpoint_dir(const fs::path& load) {
    const std::optional<fs::path> dir = find_checkpoint(load);
    MWB_CHECK(dir.has_value(), "load: '{}' holds no checkpoint (neither metadata.json nor a 'latest' marker)",
              load.string());
    return *dir;
}

namespace {

nlohmann::json read_metadata(const fs::path& iteration_dir) {
    const fs::path meta_path = iteration_dir / "metadata.json";
    nlohmann::json meta;
    try {
        meta = nlohmann::json::parse(read_file(meta_path, 256 << 20));
    } catch (const nlohmann::json::exception& e) {
        MWB_FAIL("checkpoint metadata '{}' is not valid JSON: {}", meta_path.string(), e.what());
    }
    MWB_CHECK(meta.is_object() && meta.value("format", "") == kFormat, "'{}' is not an mwb checkpoint (format \"{}\")",
              meta_path.string(), meta.is_object() ? meta.value("format", "") : std::string());
    return meta;
}

/// The scalar state of parsed metadata, every count checked (a negative iteration would make the run
/// overwrite the checkpoints it came from).
CheckpointState state_of(const nlohmann::json& meta, const fs::path& iteration_dir) {
    const std::string where = (iteration_dir / "metadata.json").string();
    MWB_CHECK(meta.at("version").get<int>() == kVersion, "'{}' has checkpoint version {}, this build reads {}", where,
              meta.at("version").get<int>(), kVersion);
    CheckpointState s;
    s.iteration = meta.at("iteration").get<int64_t>();
    s.consumed_samples = meta.at("consumed_samples").get<int64_t>();
    s.optimizer_steps = meta.at("optimizer_steps").get<int64_t>();
    s.skipped_iterations = meta.value("skipped_iterations", int64_t{0});
    s.scheduler_samples = meta.value("scheduler_samples", int64_t{-1});
    s.consumed_valid_samples = meta.value("consumed_valid_samples", int64_t{-1});
    s.loss_scaler = meta.at("loss_scaler");
    s.config = meta.value("config", nlohmann::json::object());
    MWB_CHECK(s.iteration >= 0, "'{}': iteration is {}, expected 0 or more", where, s.iteration);
    MWB_CHECK(s.consumed_samples >= 0, "'{}': consumed_samples is {}, expected 0 or more", where, s.consumed_samples);
    MWB_CHECK(s.optimizer_steps >= 0 && s.optimizer_steps <= s.iteration,
              "'{}': optimizer_steps is {}, expected 0 to the iteration ({})", where, s.optimizer_steps, s.iteration);
    MWB_CHECK(s.skipped_iterations >= 0 && s.skipped_iterations <= s.iteration,
              "'{}': skipped_iterations is {}, expected 0 to the iteration ({})", where, s.skipped_iterations,
              s.iteration);
    MWB_CHECK(s.consumed_samples >= s.iteration, "'{}': consumed_samples ({}) is below the iteration ({})", where,
              s.consumed_samples, s.iteration);
    MWB_CHECK(s.scheduler_samples >= -1 && s.scheduler_samples <= s.consumed_samples,
              "'{}': scheduler_samples is {}, expected 0 to consumed_samples ({}) (or absent)", where,
              s.scheduler_samples, s.consumed_samples);
    MWB_CHECK(s.consumed_valid_samples >= -1, "'{}': consumed_valid_samples is {}, expected 0 or more (or absent)",
              where, s.consumed_valid_samples);
    MWB_CHECK(s.loss_scaler.is_object(), "'{}': loss_scaler is not an object", where);
    MWB_CHECK(s.config.is_object(), "'{}': config is not an object", where);
    // The folder's name is the iteration ("iter_N", or ".iter_N.old" moved aside by a replacement).
    std::string folder = iteration_dir.filename().string();
    if (folder.empty()) folder = iteration_dir.parent_path().filename().string();
    if (folder.starts_with(".") && folder.ends_with(".old")) folder = folder.substr(1, folder.size() - 5);
    if (folder.starts_with("iter_"))
        MWB_CHECK(folder == iteration_dir_name(s.iteration), "'{}' records iteration {}, but its folder is {}", where,
                  s.iteration, folder);
    return s;
}

}  // namespace

CheckpointState read_checkpoint_state(const fs::path& iteration_dir) {
    const nlohmann::json meta = read_metadata(iteration_dir);
    try {
        return state_of(meta, iteration_dir);
    } catch (const nlohmann::json::exception& e) {
        MWB_FAIL("checkpoint metadata '{}' is missing or mistypes a field: {}", (iteration_dir / "metadata.json").string(),
                 e.what());
    }
}

std::vector<CheckpointTensor> parameter_slices(const ParamLayout& layout, std::size_t i, const std::string& prefix,
                                               float* data) {
    const ParamInfo& p = layout[i];
    const int64_t row = p.shape.size() == 2 ? p.shape[1] : 1;
    std::vector<CheckpointTensor> out;
    for (const auto& [begin, len] : layout.slice_blocks(i)) {
        CheckpointTensor c;
        c.name = prefix + p.name;
        c.global_shape = p.global_shape;
        c.shape = p.shape;
        c.split_dim = p.split_dim;
        c.split_begin = p.split_begin;
        if (p.split_blocks > 1) {
            c.shape[0] = len;
            c.split_begin = begin;
        }
        c.data = data;
        c.dest = data;
        c.padded_rows = role_is_vocabulary(p.role);
        out.push_back(std::move(c));
        data += len * row;
    }
    return out;
}

CheckpointState load_checkpoint(const fs::path& iteration_dir, const std::vector<CheckpointTensor>& tensors,
                                Communicator* group, bool subset) {
    const fs::path meta_path = iteration_dir / "metadata.json";
    const nlohmann::json meta = read_metadata(iteration_dir);
    try {
        const CheckpointState state = state_of(meta, iteration_dir);
        std::map<std::string, nlohmann::json> file_meta;
        for (const auto& f : meta.at("files")) {
            const std::string name = f.at("name").get<std::string>();
            MWB_CHECK(name.find('/') == std::string::npos && !name.starts_with("."), "'{}' names an invalid file '{}'",
                      meta_path.string(), name);
            file_meta.emplace(name, f);
        }
        std::multimap<std::string, nlohmann::json> entries;
        for (const auto& e : meta.at("tensors")) {
            const std::string file_name = e.at("file").get<std::string>();
            MWB_CHECK(file_meta.count(file_name), "'{}': tensor {} lives in the unlisted file {}", meta_path.string(),
                      e.at("name").get<std::string>(), file_name);
            entries.emplace(e.at("name").get<std::string>(), e);
        }

        // Every saved tensor must belong to the model: the ranks together need each one.
        std::vector<std::string> names;
        for (auto it = entries.begin(); it != entries.end(); it = entries.upper_bound(it->first)) names.push_back(it->first);
        std::vector<float> needed(names.size(), 0.0f);
        for (const CheckpointTensor& t : tensors)
            if (const auto at = std::lower_bound(names.begin(), names.end(), t.name); at != names.end() && *at == t.name)
                needed[static_cast<std::size_t>(at - names.begin())] = 1.0f;
        if (group && !needed.empty()) group->all_reduce_max(needed.data(), static_cast<int64_t>(needed.size()));
        std::vector<std::string> unknown;
        for (std::size_t i = 0; i < names.size(); ++i)
            if (needed[i] == 0.0f) unknown.push_back(names[i]);
        MWB_CHECK(subset || unknown.empty(), "checkpoint '{}' holds {} tensor(s) this model does not have: {}",
                  iteration_dir.string(), unknown.size(),
                  fmt::join(unknown.begin(), unknown.begin() + std::min<std::ptrdiff_t>(3, std::ssize(unknown)), ", "));

        // Files are mapped and verified once, when first needed.
        std::map<std::string, std::unique_ptr<MappedFile>> files;
        const auto file = [&](const std::string& name) -> const MappedFile& {
            if (auto it = files.find(name); it != files.end()) return *it->second;
            const auto fm = file_meta.find(name);
            MWB_CHECK(fm != file_meta.end(), "checkpoint '{}': a tensor lives in the unlisted file {}",
                      iteration_dir.string(), name);
            const fs::path path = iteration_dir / name;
            auto mapped = std::make_unique<MappedFile>(path);
            const int64_t expected = fm->second.at("bytes").get<int64_t>();
            MWB_CHECK(static_cast<int64_t>(mapped->size()) == expected,
                      "checkpoint file '{}' is {} bytes, metadata.json records {} (truncated?)", path.string(),
                      mapped->size(), expected);
            const std::string hash = hex64(XXH3_64bits(mapped->data(), mapped->size()));
            MWB_CHECK(hash == fm->second.at("xxh3_64").get<std::string>(),
                      "checkpoint file '{}' is corrupt: its XXH3-64 is {}, metadata.json records {}", path.string(), hash,
                      fm->second.at("xxh3_64").get<std::string>());
            return *files.emplace(name, std::move(mapped)).first->second;
        };

        for (const CheckpointTensor& t : tensors) {
            const auto [first, last] = entries.equal_range(t.name);
            MWB_CHECK(first != last, "checkpoint '{}' has no tensor {} (was it saved by a different model?)",
                      iteration_dir.string(), t.name);
            const Rect want = rect_of(t.global_shape, t.shape, t.split_dim, t.split_begin);
            const int64_t want_cols = want.col1 - want.col0;
            int64_t copied = 0, saved_rows = -1;
            for (auto it = first; it != last; ++it) {
                const auto& e = it->second;
                const auto global = e.at("global_shape").get<std::vector<int64_t>>();
                const bool same = global == t.global_shape ||
                                  (t.padded_rows && global.size() == 2 && t.global_shape.size() == 2 &&
                                   global[1] == t.global_shape[1]);
                MWB_CHECK(same, "checkpoint '{}': {} has shape [{}], this model needs [{}]", iteration_dir.string(), t.name,
                          fmt::join(global, ", "), fmt::join(t.global_shape, ", "));
                saved_rows = global[0];
                const auto shape = e.at("shape").get<std::vector<int64_t>>();
                const Rect have = rect_of(global, shape, e.at("split_dim").get<int>(), e.at("split_begin").get<int64_t>());
                const int64_t r0 = std::max(want.row0, have.row0), r1 = std::min(want.row1, have.row1);
                const int64_t c0 = std::max(want.col0, have.col0), c1 = std::min(want.col1, have.col1);
                if (r0 >= r1 || c0 >= c1) continue;
                const MappedFile& f = file(e.at("file").get<std::string>());
                const int64_t offset = e.at("offset").get<int64_t>(), bytes = e.at("bytes").get<int64_t>();
                MWB_CHECK(bytes == numel_of(shape) * 4 && offset >= 0 && offset + bytes <= static_cast<int64_t>(f.size()),
                          "checkpoint '{}': {} lies outside its file", iteration_dir.string(), t.name);
                const float* src = reinterpret_cast<const float*>(f.data() + offset);  // 64-byte aligned in the file
                const int64_t have_cols = have.col1 - have.col0;
                for (int64_t row = r0; row < r1; ++row)
                    std::memcpy(t.dest + (row - want.row0) * want_cols + (c0 - want.col0),
                                src + (row - have.row0) * have_cols + (c0 - have.col0),
                                static_cast<std::size_t>(c1 - c0) * sizeof(float));
                copied += (r1 - r0) * (c1 - c0);
            }
            if (t.padded_rows && saved_rows >= 0 && want.row1 > saved_rows) {
                // Padding rows this layout has and the saved one had not: zero.
                const int64_t r0 = std::max(want.row0, saved_rows);
                std::memset(t.dest + (r0 - want.row0) * want_cols, 0,
                            static_cast<std::size_t>((want.row1 - r0) * want_cols) * sizeof(float));
                copied += (want.row1 - r0) * want_cols;
            }
            MWB_CHECK(copied == numel_of(t.shape), "checkpoint '{}' covers {} of the {} elements of {} this rank needs",
                      iteration_dir.string(), copied, numel_of(t.shape), t.name);
        }

        return state;
    } catch (const nlohmann::json::exception& e) {
        MWB_FAIL("checkpoint metadata '{}' is missing or mistypes a field: {}", meta_path.string(), e.what());
    }
}

}  // namespace mwb
