#pragma once
// How the app writes numbers: bytes, big counts, FLOP/s, durations, times. One place, so the Designer,
// Monitor and History agree ("1.23 GiB", "175.0 B", "2.4 h").
#include <QString>

namespace mwb::app {

/// "1.23 GiB", "512.0 MiB", "17 B".
QString format_bytes(double bytes);
/// "175.0 B", "2.7 M", "950" (parameters, tokens).
QString format_count(double n);
/// "3.14e+18" style for FLOPs: "3.14 EFLOP", "950 TFLOP".
QString format_flops(double flops);
/// "12.6 s", "3 min 20 s", "2.4 h", "12.3 days"; "—" for negative or non-finite.
QString format_duration(double seconds);
/// Four significant digits, scientific outside 1e-3..1e6 ("2.314", "6.000e-05").
QString format_value(double v);
/// "12,345" with thousands separators.
QString format_int(long long v);
/// Local date and time of Unix seconds: "2025-03-01 10:15".
QString format_time(double unix_seconds);
/// "45.2%".
QString format_percent(double fraction);

}  // namespace mwb::app
