#pragma once
// The command line shared by mwb-train and mwb-plan: every configuration field as its Megatron-LM
// flag (fields.cpp), plus one table (cli.cpp) of the Megatron-LM flags that are not a field of their
// own name: aliases whose destination differs (store_false flags such as --disable-bias-linear),
// flags accepted and recorded that change nothing here (kernel and backend selection, W&B, ...),
// and flags refused because they change the math in a way this engine does not implement yet.
#include "backend/config/config_io.h"

#include <CLI/CLI.hpp>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mwb {

/// What a Megatron-LM flag that is not a field of its own name does here.
enum class FlagKind {
    Alias,         ///< sets `field` (to `value`, or to the flag's argument when `value` is empty)
    NoEffect,      ///< accepted and recorded; `note` says what this engine does instead
    OnlyDefault,   ///< accepted with Megatron-LM's default value (`value`), refused with any other
    Unsupported,   ///< refused: "not supported yet"; `note` says why
};

struct MegatronFlag {
    std::string_view flag;   ///< "--disable-bias-linear"
    FlagKind kind;
    int nargs;               ///< 0: a switch; 1: one value; -1: one or more values
    std::string_view field;  ///< Alias: the field it sets
    std::string_view value;  ///< Alias: the value it sets ("" = the argument); OnlyDefault: the accepted value
    std::string_view note;   ///< NoEffect/OnlyDefault/Unsupported: one line for the user
};

/// The table of Megatron-LM flags beyond the fields.
std::span<const MegatronFlag> megatron_flags();
/// Markdown of that table (docs/config.md is generated from it and config_reference_markdown()).
std::string megatron_flags_markdown();

/// A flag given on the command line that changes nothing here, for the run's record.
struct RecordedFlag {
    std::string flag;
    std::vector<std::string> values;
    std::string note;
};

/// Registers every field and every flag of megatron_flags() on a CLI11 app, and after parsing
/// applies what was given onto a configuration.
class ConfigFlags {
public:
    explicit ConfigFlags(CLI::App& app);
    ConfigFlags(const ConfigFlags&) = delete;
    ConfigFlags& operator=(const ConfigFlags&) = delete;

    /// Whether a flag of a model, parallel, training or data field (or an alias of one) was given:
    /// then the configuration starts from Megatron-LM's defaults, not from the demo preset.
    bool sets_model_or_training() const;
    /// Applies the given field flags, then the aliases, onto `config`; refuses unsupported flags.
    /// Throws ConfigError naming every bad flag.
    void apply(Config& config) const;
    /// The accepted flags without effect that were given (for run.json and the start-up log).
    std::vector<RecordedFlag> recorded() const;

private:
    std::vector<std::pair<const Field*, CLI::Option*>> fields_;
    std::vector<std::pair<const MegatronFlag*, CLI::Option*>> megatron_;
};

/// Parses the command line. Returns the exit status when the program should stop now: 0 after
/// --help, 2 on any parse error (printed to stderr with "did you mean --x?" for a misspelt flag,
/// only when `print`). std::nullopt: parsed, go on.
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv, bool print = true);

/// The registered flag closest to a misspelt one ("--num-layers" for "--num-layer"), or "".
std::string closest_flag(const CLI::App& app, std::string_view flag);

}  // namespace mwb
