#!/usr/bin/env bash
# The UI check: starts the app's real window under Xvfb, runs two short real trainings from the
# Launch view (one process, then two ranks under mpirun), switches every view and saves screenshots
# into docs/screenshots/ (or DIR). Look at every picture before landing a change to app/.
#   scripts/ui-check.sh [DIR]        (build first: cmake --build build --target mwb-screenshots mwb-train)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/screenshots}"
exe=build/tests/app/mwb-screenshots
[ -x "$exe" ] || { echo "ui-check: build $exe first (cmake --build build --target mwb-screenshots mwb-train)" >&2; exit 2; }
command -v xvfb-run >/dev/null || { echo "ui-check: xvfb-run is missing (apt-get install xvfb xauth)" >&2; exit 2; }
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
chmod 700 "$XDG_RUNTIME_DIR"
unset QT_QPA_PLATFORM  # the real xcb window, not offscreen
xvfb-run -a -s "-screen 0 1600x1000x24" "$exe" "$out"
echo "ui-check: screenshots in $out"
