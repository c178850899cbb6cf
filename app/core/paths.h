#pragma once
// Where the app finds its programs and keeps its files.
#include <QString>

#include <filesystem>

namespace mwb::app {

/// mwb-train: $MWB_TRAIN, next to the mwb executable, in a build tree (../backend/mwb-train), the
/// build directory this was compiled in, then PATH. Empty when none exists.
QString find_trainer();
/// mwb-generate, found the same way ($MWB_GENERATE first). Empty when none exists.
QString find_generator();
/// mpirun on PATH (empty when Open MPI is not installed).
QString find_mpirun();
/// The store the app records into and reads: $MWB_STORE, else store::default_store_path().
std::filesystem::path default_store_file();
/// $XDG_DATA_HOME/mwb/runs: where local runs get their run directories.
std::filesystem::path runs_root();
/// A fresh run directory path under runs_root(): <yyyyMMdd-HHmmss>-<name> (not created).
std::filesystem::path new_run_dir(const QString& name);
/// Processor cores of this machine (threads to give local runs).
int local_cores();

QString to_qstring(const std::filesystem::path& p);
std::filesystem::path to_path(const QString& s);

}  // namespace mwb::app
