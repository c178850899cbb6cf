#!/usr/bin/env bash
# The main job. Sets up (scripts/setup.sh), then trains the embedded demo GPT (a small byte-level GPT
# on the bundled corpus, CPU) and keeps it in the run history:
#   - with a display ($DISPLAY or $WAYLAND_DISPLAY): starts the app `mwb --demo`, which launches the
#     run, streams it into the Monitor and records it into the store (History tab);
#   - without one (CI, ssh): runs mwb-train headless, records it with mwb-record as it trains, and
#     prints where the run directory and the history went.
# Extra arguments go to mwb-train when headless (e.g. --train-iters 50), to mwb otherwise.
# MWB_DEMO_HEADLESS=1 forces the headless path; MWB_STORE=FILE records elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build="${MWB_BUILD_DIR:-build}"
data_home="${XDG_DATA_HOME:-$HOME/.local/share}"
store="${MWB_STORE:-$data_home/mwb/history.sqlite}"
export MWB_STORE="$store"

if [ -z "${MWB_DEMO_HEADLESS:-}" ] && { [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; } && [ -x "$build/app/mwb" ]; then
  echo "demo: starting the app with a local demo run (Monitor tab); the run is recorded in $store"
  exec "$build/app/mwb" --demo "$@"
fi

# Headless: the recorder follows the run directory (which need not exist yet) while mwb-train trains.
run_dir="$data_home/mwb/runs/$(date +%Y%m%d-%H%M%S)-demo"
echo "demo: no display; training headless into $run_dir, recording into $store"
mkdir -p "$(dirname "$store")"
record_log="$(mktemp)"
"$build/store/mwb-record" --store "$store" --until-end "$run_dir" > "$record_log" 2>&1 &
recorder=$!
status=0
"$build/backend/mwb-train" --preset tiny-cpu-demo --run-dir "$run_dir" "$@" || status=$?
# The recorder exits at run.end; a run that never started (refused flags) has none: stop waiting.
for _ in $(seq 1 100); do kill -0 "$recorder" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$recorder" 2>/dev/null; then kill -TERM "$recorder" 2>/dev/null || true; fi
wait "$recorder" 2>/dev/null || echo "demo: the recorder stopped early: $(tail -n 3 "$record_log")"
rm -f "$record_log"
# Whatever the recorder missed (it never misses on a healthy run) comes from the run's files.
if [ -f "$run_dir/events.jsonl" ]; then
  "$build/store/mwb-record" import --store "$store" "$run_dir" > /dev/null
fi
echo
echo "demo: run directory  $run_dir"
echo "demo: history        $store"
"$build/store/mwb-record" runs --store "$store" | head -n 6 || true
echo "demo: open it with   $build/app/mwb   (History tab), or: $build/store/mwb-record runs"
exit "$status"
