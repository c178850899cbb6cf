#include "app/plot/memory_bars.h"

#include "app/core/format.h"
#include "app/core/theme.h"

#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QToolTip>

#include <algorithm>
#include <cmath>

namespace mwb::app {

namespace {
constexpr int kLegendRow = 18;
}  // namespace

const char* category_key(int c) {
    return ipc::kMemoryCategories[static_cast<std::size_t>(std::clamp(c, 0, kCategories - 1))]
        .data();  // literals: terminated
}

QString category_label(int c) {
    return QString::fromLatin1(category_key(c));
}

std::array<double, kCategories> stack_memory(const std::array<double, kCategories>& current,
                                             const std::array<double, kCategories>& peak, double peak_total) {
    std::array<double, kCategories> out = current;
    double base = 0, growth = 0;
    for (int c = 0; c < kCategories; ++c) {
        base += current[static_cast<std::size_t>(c)];
        growth += std::max(0.0, peak[static_cast<std::size_t>(c)] - current[static_cast<std::size_t>(c)]);
    }
    const double extra = peak_total - base;
    if (extra <= 0) {
        if (base > 0 && peak_total > 0)
            for (double& v : out) v *= peak_total / base;
        return out;
    }
    if (growth <= 0) {
        out[3] += extra;  // activations
        return out;
    }
    for (int c = 0; c < kCategories; ++c) {
        const auto i = static_cast<std::size_t>(c);
        out[i] += extra * std::max(0.0, peak[i] - current[i]) / growth;
    }
    return out;
}

MemoryBars::MemoryBars(QWidget* parent) : QWidget(parent) {
    setMouseTracking(true);
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
}

void MemoryBars::setBars(std::vector<MemoryBar> bars, double capacity, double limit) {
    bars_ = std::move(bars);
    capacity_ = capacity;
    limit_ = limit;
    updateGeometry();
    update();
}

void MemoryBars::setEmptyText(const QString& text) {
    empty_ = text;
    update();
}

int MemoryBars::rowHeight() const {
    const int n = std::max<int>(1, static_cast<int>(bars_.size()));
    if (n <= 16) return fontMetrics().height() + 8;
    if (n <= 64) return std::max(8, fontMetrics().height());
    return 6;
}

int MemoryBars::legendHeight() const {
    // the category legend wraps as paintEvent lays it out; the markers take one more row
    const QFontMetrics fm = fontMetrics();
    int x = 6, rows = 1;
    for (int c = 0; c < kCategories; ++c) {
        const int w = 14 + fm.horizontalAdvance(category_label(c)) + 12;
        if (x + w > width() - 4 && x > 6) {
            x = 6;
            ++rows;
        }
        x += w;
    }
    return (rows + 1) * kLegendRow + 6;
}

QSize MemoryBars::sizeHint() const {
    return {420, legendHeight() + static_cast<int>(std::max<std::size_t>(bars_.size(), 2)) * rowHeight() + 24};
}

QSize MemoryBars::minimumSizeHint() const {
    return {260, legendHeight() + 2 * rowHeight() + 24};
}

void MemoryBars::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing);
    const QPalette pal = palette();
    const QColor text = pal.color(QPalette::Text), muted = pal.color(QPalette::PlaceholderText);
    const QFontMetrics fm = fontMetrics();
    p.fillRect(rect(), pal.color(QPalette::Base));

    // legend: categories, then the markers
    int x = 6, y = 4;
    for (int c = 0; c < kCategories; ++c) {
        const QString name = category_label(c);
        const int w = 14 + fm.horizontalAdvance(name) + 12;
        if (x + w > width() - 4 && x > 6) {
            x = 6;
            y += kLegendRow;
        }
        p.fillRect(QRect(x, y + 4, 10, 10), category_color(c));
        p.setPen(text);
        p.drawText(QPoint(x + 14, y + 4 + fm.ascent() - 1), name);
        x += w;
    }
    x = 6;
    y += kLegendRow;
    const auto legend_item = [&](const QString& label, auto&& draw) {
        const int w = 18 + fm.horizontalAdvance(label) + 12;
        if (x + w > width() - 4) return;
        draw(QRect(x, y + 2, 12, 14));
        p.setPen(text);
        p.drawText(QPoint(x + 16, y + 4 + fm.ascent() - 1), label);
        x += w;
    };
    legend_item(tr("now"), [&](QRect r) {
        p.setPen(QPen(text, 2));
        p.drawLine(r.center().x(), r.top(), r.center().x(), r.bottom());
    });
    legend_item(tr("predicted peak"), [&](QRect r) {
        QPainterPath d;
        const QPointF c = QRectF(r).center();
        d.moveTo(c.x(), c.y() - 5);
        d.lineTo(c.x() + 5, c.y());
        d.lineTo(c.x(), c.y() + 5);
        d.lineTo(c.x() - 5, c.y());
        d.closeSubpath();
        p.fillPath(d, text);
    });
    if (limit_ > 0)
        legend_item(tr("usable memory"), [&](QRect r) {
            p.setPen(QPen(error_color(), 2, Qt::DashLine));
            p.drawLine(r.center().x(), r.top(), r.center().x(), r.bottom());
        });

    const int top = legendHeight();
    if (bars_.empty()) {
        p.setPen(muted);
        p.drawText(rect().adjusted(8, top, -8, -8), Qt::AlignCenter | Qt::TextWordWrap, empty_);
        return;
    }
    double scale = std::max(capacity_, limit_);
    for (const auto& b : bars_) {
        double total = 0;
        for (double v : b.segments) total += v;
        scale = std::max({scale, total, b.predicted, b.current});
    }
    if (scale <= 0) scale = 1;
    scale *= 1.02;

    const int rh = rowHeight();
    const bool labels = rh >= fm.height();
    int label_w = 0;
    if (labels)
        for (const auto& b : bars_) label_w = std::max(label_w, fm.horizontalAdvance(b.label));
    const QString cap_text = capacity_ > 0 ? QStringLiteral(" / ") + format_bytes(capacity_) : QString();
    const int value_w = labels ? fm.horizontalAdvance(QStringLiteral("999.9 MiB") + cap_text) + 8 : 0;
    const int left = 6 + label_w + (labels ? 8 : 0);
    const int bar_w = std::max(40, width() - left - value_w - 8);
    const auto px = [&](double bytes) { return left + bar_w * bytes / scale; };

    for (std::size_t i = 0; i < bars_.size(); ++i) {
        const auto& b = bars_[i];
        const int ry = top + static_cast<int>(i) * rh;
        const int bh = std::max(3, rh - (labels ? 8 : 2));
        const int by = ry + (rh - bh) / 2;
        p.fillRect(QRectF(left, by, bar_w, bh), pal.color(QPalette::AlternateBase));
        double acc = 0, total = 0;
        for (int c = 0; c < kCategories; ++c) {
            const double v = b.segments[static_cast<std::size_t>(c)];
            if (v <= 0) continue;
            p.fillRect(QRectF(px(acc), by, px(acc + v) - px(acc), bh), category_color(c));
            acc += v;
        }
        total = acc;
        if (b.current >= 0) {
            p.setPen(QPen(text, 2));
            p.drawLine(QPointF(px(b.current), by - 2), QPointF(px(b.current), by + bh + 2));
        }
        if (b.predicted >= 0) {
            const QPointF c(px(b.predicted), by + bh / 2.0);
            const double r = std::min(5.0, bh / 2.0 + 1);
            QPainterPath d;
            d.moveTo(c.x(), c.y() - r);
            d.lineTo(c.x() + r, c.y());
            d.lineTo(c.x(), c.y() + r);
            d.lineTo(c.x() - r, c.y());
            d.closeSubpath();
            p.fillPath(d, text);
            p.setPen(QPen(pal.color(QPalette::Base), 1));
            p.drawPath(d);
        }
        if (labels) {
            p.setPen(text);
            p.drawText(QRect(6, ry, label_w, rh), Qt::AlignVCenter | Qt::AlignLeft, b.label);
            const bool over = limit_ > 0 && total > limit_;
            p.setPen(over ? error_color() : muted);
            p.drawText(QRect(left + bar_w + 6, ry, value_w, rh), Qt::AlignVCenter | Qt::AlignLeft,
                       format_bytes(total) + cap_text);
        }
    }
    const int bottom = top + static_cast<int>(bars_.size()) * rh;
    if (limit_ > 0) {
        p.setPen(QPen(error_color(), 1.5, Qt::DashLine));
        p.drawLine(QPointF(px(limit_), top - 2), QPointF(px(limit_), bottom + 2));
    }
    if (capacity_ > 0) {
        p.setPen(QPen(muted, 1));
        p.drawLine(QPointF(px(capacity_), top - 2), QPointF(px(capacity_), bottom + 2));
    }
    // scale
    p.setPen(muted);
    p.drawText(QRect(left, bottom + 2, bar_w, fm.height()), Qt::AlignLeft, QStringLiteral("0"));
    p.drawText(QRect(left, bottom + 2, bar_w, fm.height()), Qt::AlignRight, format_bytes(scale / 1.02));
}

void MemoryBars::mouseMoveEvent(QMouseEvent* e) {
    const int i = (static_cast<int>(e->position().y()) - legendHeight()) / std::max(1, rowHeight());
    if (i < 0 || i >= static_cast<int>(bars_.size())) {
        QToolTip::hideText();
        return;
    }
    const auto& b = bars_[static_cast<std::size_t>(i)];
    QString tip = QStringLiteral("<b>%1</b><br>").arg(b.label.toHtmlEscaped());
    if (!b.tooltip.isEmpty()) {
        tip += b.tooltip;
    } else {
        for (int c = 0; c < kCategories; ++c)
            tip += QStringLiteral("%1: %2<br>")
                       .arg(category_label(c), format_bytes(b.segments[static_cast<std::size_t>(c)]));
    }
    QToolTip::showText(e->globalPosition().toPoint(), tip, this);
}

}  // namespace mwb::app
