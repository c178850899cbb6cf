#include "app/plot/stacked_bar.h"

#include <QPainter>

#include <algorithm>

namespace mwb::app {

namespace {
constexpr int kBar = 16;
}

StackedBar::StackedBar(QWidget* parent) : QWidget(parent) {
    QSizePolicy sp(QSizePolicy::Expanding, QSizePolicy::Preferred);
    sp.setHeightForWidth(true);
    setSizePolicy(sp);
}

void StackedBar::setSegments(std::vector<BarSegment> segments, std::function<QString(double)> format) {
    segments_ = std::move(segments);
    format_ = std::move(format);
    updateGeometry();
    update();
}

QString StackedBar::legendText(const BarSegment& s) const {
    double total = 0;
    for (const auto& x : segments_) total += std::max(0.0, x.value);
    const double share = total > 0 ? 100 * s.value / total : 0;
    return QStringLiteral("%1 %2 (%3%)")
        .arg(s.name, format_ ? format_(s.value) : QString::number(s.value))
        .arg(share, 0, 'f', share < 10 ? 1 : 0);
}

int StackedBar::legendRows(int width) const {
    const QFontMetrics fm = fontMetrics();
    int rows = 1, x = 0;
    for (const auto& s : segments_) {
        if (s.value <= 0) continue;
        const int w = 16 + fm.horizontalAdvance(legendText(s)) + 14;
        if (x > 0 && x + w > width) {
            ++rows;
            x = 0;
        }
        x += w;
    }
    return rows;
}

int StackedBar::heightForWidth(int w) const {
    return kBar + 8 + legendRows(w) * (fontMetrics().height() + 4);
}

QSize StackedBar::sizeHint() const {
    return {360, heightForWidth(360)};
}

void StackedBar::paintEvent(QPaintEvent*) {
    QPainter p(this);
    const QPalette pal = palette();
    const QFontMetrics fm = fontMetrics();
    double total = 0;
    for (const auto& s : segments_) total += std::max(0.0, s.value);
    const QRectF bar(0, 2, width() - 1, kBar);
    p.fillRect(bar, pal.color(QPalette::AlternateBase));
    if (total > 0) {
        double x = bar.left();
        for (const auto& s : segments_) {
            if (s.value <= 0) continue;
            const double w = bar.width() * s.value / total;
            p.fillRect(QRectF(x, bar.top(), w, bar.height()), s.color);
            x += w;
        }
    }
    int x = 0, y = kBar + 8;
    for (const auto& s : segments_) {
        if (s.value <= 0) continue;
        const QString t = legendText(s);
        const int w = 16 + fm.horizontalAdvance(t) + 14;
        if (x > 0 && x + w > width()) {
            x = 0;
            y += fm.height() + 4;
        }
        p.fillRect(QRect(x, y + (fm.height() - 10) / 2, 10, 10), s.color);
        p.setPen(pal.color(QPalette::Text));
        p.drawText(QPoint(x + 14, y + fm.ascent()), t);
        x += w;
    }
}

}  // namespace mwb::app
