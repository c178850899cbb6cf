#pragma once
// Axis ticks a reader can use: round numbers (1, 2 or 5 times a power of ten) labelled with SI
// prefixes ("0, 2k, 4k, 6k"; "0, 250M, 500M"; "100µ, 200µ"), and for log axes 1-2-5 or decade ticks
// (falling back to round numbers inside a narrow range, so a loss between 2.3 and 2.6 is still
// labelled). Qt-free: PlotView hands the ticks to its category axes.
#include <string>
#include <vector>

namespace mwb::app {

/// The round step of about `count` intervals over [lo, hi] (Heckbert's nice numbers).
double nice_step(double lo, double hi, int count);
/// Multiples of nice_step(lo, hi, count) inside [lo, hi] (ends included when they are multiples).
std::vector<double> nice_ticks(double lo, double hi, int count = 5);
/// Tick values for a log axis over [lo, hi] (lo > 0): 1-2-5 per decade, decades only when that is
/// too many, every n-th decade beyond, nice_ticks() within a narrow range. About `count` or more.
std::vector<double> log_ticks(double lo, double hi, int count = 5);
/// `v` with an SI prefix (k, M, G, T, P from 1000; m, µ, n, p below 0.01; plain in between) and as many decimals as `step` needs to tell
/// neighbouring ticks apart: format_tick(2500, 500) = "2.5k", format_tick(0.0003, 0.0001) = "300µ".
/// `magnitude` (default |v|) picks the prefix: an axis passes its largest |tick| so every label of
/// it has the same prefix ("0, 5m, 10m, 15m", not "0, 5m, 0.01, 0.015").
std::string format_tick(double v, double step, double magnitude = -1);

}  // namespace mwb::app
