#pragma once
// The run's description: run.json and the run.start record (config, derived sizes, topology, hosts,
// data, build) with the opening lines, and the run.end record.
#include "backend/train/progress.h"
#include "backend/train/run_objects.h"
#include "backend/train/trainer.h"

#include <string>

namespace mwb {

class RunDir;

class RunMetadata {
public:
    /// `dir`: rank 0's run directory, null on the other ranks.
    RunMetadata(RunObjects& objects, const TrainerInputs& in, RunDir* dir) : o_(objects), in_(in), dir_(dir) {}

    /// Every rank: hosts and parameter counts gathered; rank 0 writes run.json, publishes run.start
    /// and prints the run's description.
    void announce(const Progress& p);
    /// run.end with `status` ("finished", "stopped", "interrupted", "failed") and why.
    void finish(const std::string& status, const std::string& reason, const Progress& p);

private:
    nlohmann::json topology() const;

    RunObjects& o_;
    const TrainerInputs& in_;
    RunDir* dir_;
};

}  // namespace mwb
