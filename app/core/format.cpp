#include "app/core/format.h"

#include <QDateTime>
#include <QLocale>

#include <cmath>

namespace mwb::app {

QString format_bytes(double bytes) {
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (!std::isfinite(bytes)) return QStringLiteral("—");
    const double sign = bytes < 0 ? -1 : 1;
    double v = std::abs(bytes);
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        ++u;
    }
    if (u == 0) return QStringLiteral("%1 B").arg(sign * v, 0, 'f', 0);
    return QStringLiteral("%1 %2").arg(sign * v, 0, 'f', v < 10 ? 2 : 1).arg(QLatin1String(units[u]));
}

QString format_count(double n) {
    if (!std::isfinite(n)) return QStringLiteral("—");
    const double a = std::abs(n);
    if (a >= 1e12) return QStringLiteral("%1 T").arg(n / 1e12, 0, 'f', 2);
    if (a >= 1e9) return QStringLiteral("%1 B").arg(n / 1e9, 0, 'f', a >= 1e11 ? 1 : 2);
    if (a >= 1e6) return QStringLiteral("%1 M").arg(n / 1e6, 0, 'f', a >= 1e8 ? 1 : 2);
    if (a >= 1e4) return QStringLiteral("%1 k").arg(n / 1e3, 0, 'f', 1);
    return QString::number(n, 'f', 0);
}

QString format_flops(double f) {
    if (!std::isfinite(f) || f <= 0) return QStringLiteral("—");
    static const char* units[] = {"", "k", "M", "G", "T", "P", "E", "Z", "Y"};
    int u = 0;
    while (f >= 1000 && u < 8) {
        f /= 1000;
        ++u;
    }
    return QStringLiteral("%1 %2FLOP").arg(f, 0, 'f', f < 10 ? 2 : (f < 100 ? 1 : 0)).arg(QLatin1String(units[u]));
}

QString format_duration(double s) {
    if (!std::isfinite(s) || s < 0) return QStringLiteral("—");
    if (s < 1e-3) return QStringLiteral("%1 µs").arg(s * 1e6, 0, 'f', 0);
    if (s < 1) return QStringLiteral("%1 ms").arg(s * 1e3, 0, 'f', s < 0.01 ? 2 : 1);
    if (s < 60) return QStringLiteral("%1 s").arg(s, 0, 'f', s < 10 ? 2 : 1);
    if (s < 3600) {
        const int m = static_cast<int>(s / 60);
        return QStringLiteral("%1 min %2 s").arg(m).arg(static_cast<int>(s - 60 * m));
    }
    if (s < 86400 * 2) return QStringLiteral("%1 h").arg(s / 3600, 0, 'f', 1);
    return QStringLiteral("%1 days").arg(s / 86400, 0, 'f', s < 86400 * 100 ? 1 : 0);
}

QString format_value(double v) {
    if (!std::isfinite(v)) return QStringLiteral("—");
    const double a = std::abs(v);
    if (a != 0 && (a < 1e-3 || a >= 1e6)) return QString::number(v, 'e', 3);
    return QString::number(v, 'g', 4);
}

QString format_int(long long v) {
    return QLocale(QLocale::English).toString(v);
}

QString format_time(double t) {
    if (!std::isfinite(t) || t <= 0) return QStringLiteral("—");
    return QDateTime::fromMSecsSinceEpoch(static_cast<qint64>(t * 1000)).toString(QStringLiteral("yyyy-MM-dd HH:mm"));
}

QString format_percent(double f) {
    if (!std::isfinite(f)) return QStringLiteral("—");
    return QStringLiteral("%1%").arg(f * 100, 0, 'f', f < 0.1 ? 2 : 1);
}

}  // namespace mwb::app
