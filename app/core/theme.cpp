#include "app/core/theme.h"

#include <QApplication>
#include <QChart>
#include <QGraphicsLayout>
#include <QPalette>
#include <QStyleFactory>

#include <algorithm>
#include <array>
#include <cmath>

namespace mwb::app {

namespace {

Theme g_theme = Theme::Light;

QPalette light_palette() {
    QPalette p;
    p.setColor(QPalette::Window, QColor(0xf4, 0xf5, 0xf7));
    p.setColor(QPalette::WindowText, QColor(0x1d, 0x21, 0x27));
    p.setColor(QPalette::Base, Qt::white);
    p.setColor(QPalette::AlternateBase, QColor(0xee, 0xf0, 0xf3));
    p.setColor(QPalette::ToolTipBase, QColor(0xff, 0xff, 0xe8));
    p.setColor(QPalette::ToolTipText, Qt::black);
    p.setColor(QPalette::PlaceholderText, QColor(0x80, 0x86, 0x8f));
    p.setColor(QPalette::Text, QColor(0x1d, 0x21, 0x27));
    p.setColor(QPalette::Button, QColor(0xe9, 0xeb, 0xee));
    p.setColor(QPalette::ButtonText, QColor(0x1d, 0x21, 0x27));
    p.setColor(QPalette::BrightText, Qt::red);
    p.setColor(QPalette::Highlight, QColor(0x2f, 0x6f, 0xd6));
    p.setColor(QPalette::HighlightedText, Qt::white);
    p.setColor(QPalette::Link, QColor(0x1f, 0x5f, 0xc6));
    p.setColor(QPalette::Mid, QColor(0xc4, 0xc8, 0xce));
    p.setColor(QPalette::Disabled, QPalette::Text, QColor(0x9a, 0x9f, 0xa6));
    p.setColor(QPalette::Disabled, QPalette::ButtonText, QColor(0x9a, 0x9f, 0xa6));
    p.setColor(QPalette::Disabled, QPalette::WindowText, QColor(0x9a, 0x9f, 0xa6));
    return p;
}

QPalette dark_palette() {
    QPalette p;
    p.setColor(QPalette::Window, QColor(0x23, 0x26, 0x2b));
    p.setColor(QPalette::WindowText, QColor(0xe3, 0xe6, 0xea));
    p.setColor(QPalette::Base, QColor(0x1a, 0x1c, 0x20));
    p.setColor(QPalette::AlternateBase, QColor(0x26, 0x29, 0x2f));
    p.setColor(QPalette::ToolTipBase, QColor(0x30, 0x33, 0x39));
    p.setColor(QPalette::ToolTipText, QColor(0xe3, 0xe6, 0xea));
    p.setColor(QPalette::PlaceholderText, QColor(0x8a, 0x90, 0x99));
    p.setColor(QPalette::Text, QColor(0xe3, 0xe6, 0xea));
    p.setColor(QPalette::Button, QColor(0x2f, 0x33, 0x3a));
    p.setColor(QPalette::ButtonText, QColor(0xe3, 0xe6, 0xea));
    p.setColor(QPalette::BrightText, QColor(0xff, 0x6b, 0x6b));
    p.setColor(QPalette::Highlight, QColor(0x3d, 0x7e, 0xe6));
    p.setColor(QPalette::HighlightedText, Qt::white);
    p.setColor(QPalette::Link, QColor(0x7a, 0xb0, 0xff));
    p.setColor(QPalette::Mid, QColor(0x4a, 0x4f, 0x58));
    p.setColor(QPalette::Light, QColor(0x3a, 0x3e, 0x46));
    p.setColor(QPalette::Dark, QColor(0x15, 0x17, 0x1a));
    p.setColor(QPalette::Disabled, QPalette::Text, QColor(0x6d, 0x72, 0x7a));
    p.setColor(QPalette::Disabled, QPalette::ButtonText, QColor(0x6d, 0x72, 0x7a));
    p.setColor(QPalette::Disabled, QPalette::WindowText, QColor(0x6d, 0x72, 0x7a));
    return p;
}

}  // namespace

void apply_theme(Theme theme) {
    g_theme = theme;
    if (auto* s = QStyleFactory::create(QStringLiteral("Fusion"))) QApplication::setStyle(s);
    QApplication::setPalette(theme == Theme::Dark ? dark_palette() : light_palette());
}

Theme current_theme() {
    return g_theme;
}
bool dark_theme() {
    return g_theme == Theme::Dark;
}

QString theme_name(Theme t) {
    return t == Theme::Dark ? QStringLiteral("dark") : QStringLiteral("light");
}
Theme theme_from_name(const QString& n) {
    return n == QLatin1String("dark") ? Theme::Dark : Theme::Light;
}

QColor category_color(int c) {
    // weights, gradients, optimizer, activations, workspace, data
    static const std::array<QColor, 6> light = {QColor(0x3b, 0x6f, 0xc4), QColor(0xe0, 0x8a, 0x1e),
                                                QColor(0x3f, 0x9e, 0x58), QColor(0xc9, 0x45, 0x4c),
                                                QColor(0x8a, 0x63, 0xc0), QColor(0x7d, 0x86, 0x90)};
    static const std::array<QColor, 6> dark = {QColor(0x5f, 0x95, 0xf0), QColor(0xf2, 0xa0, 0x3c),
                                               QColor(0x5c, 0xc0, 0x75), QColor(0xf0, 0x65, 0x6c),
                                               QColor(0xb0, 0x8a, 0xea), QColor(0xa0, 0xa8, 0xb2)};
    const auto& t = dark_theme() ? dark : light;
    return t[static_cast<std::size_t>(std::clamp(c, 0, 5))];
}

QColor series_color(int i) {
    static const std::array<QColor, 10> light = {
        QColor(0x1f, 0x77, 0xb4), QColor(0xd6, 0x5f, 0x0e), QColor(0x2c, 0xa0, 0x2c), QColor(0xc6, 0x27, 0x28),
        QColor(0x94, 0x67, 0xbd), QColor(0x8c, 0x56, 0x4b), QColor(0xe3, 0x77, 0xc2), QColor(0x5f, 0x66, 0x6d),
        QColor(0xa8, 0xa0, 0x12), QColor(0x17, 0xa2, 0xb8)};
    static const std::array<QColor, 10> dark = {
        QColor(0x5d, 0xa5, 0xf0), QColor(0xff, 0x9a, 0x4a), QColor(0x5c, 0xd0, 0x5c), QColor(0xff, 0x6b, 0x6b),
        QColor(0xc3, 0x9b, 0xf0), QColor(0xd0, 0x9c, 0x8a), QColor(0xf5, 0x9e, 0xd8), QColor(0xb0, 0xb7, 0xbf),
        QColor(0xe0, 0xd6, 0x4a), QColor(0x4f, 0xd6, 0xea)};
    const auto& t = dark_theme() ? dark : light;
    return t[static_cast<std::size_t>(((i % 10) + 10) % 10)];
}

QColor compute_color() {
    return dark_theme() ? QColor(0x5f, 0x95, 0xf0) : QColor(0x3b, 0x6f, 0xc4);
}
QColor communication_color() {
    return dark_theme() ? QColor(0xf2, 0xa0, 0x3c) : QColor(0xe0, 0x8a, 0x1e);
}
QColor bubble_color() {
    return dark_theme() ? QColor(0xf0, 0x65, 0x6c) : QColor(0xc9, 0x45, 0x4c);
}
QColor error_color() {
    return dark_theme() ? QColor(0xff, 0x7b, 0x7b) : QColor(0xb4, 0x1e, 0x24);
}
QColor ok_color() {
    return dark_theme() ? QColor(0x6c, 0xd4, 0x85) : QColor(0x1d, 0x7d, 0x3a);
}
QColor warning_color() {
    return dark_theme() ? QColor(0xf5, 0xc2, 0x4c) : QColor(0x9a, 0x62, 0x00);
}

QColor ramp_color(double t) {
    // viridis, 9 stops
    static const std::array<QColor, 9> stops = {QColor(68, 1, 84),    QColor(71, 45, 123),  QColor(59, 82, 139),
                                                QColor(44, 114, 142), QColor(33, 145, 140), QColor(40, 174, 128),
                                                QColor(94, 201, 98),  QColor(173, 220, 48), QColor(253, 231, 37)};
    if (!std::isfinite(t)) return QColor(0x80, 0x80, 0x80);
    t = std::clamp(t, 0.0, 1.0) * 8;
    const int i = std::min(7, static_cast<int>(t));
    const double f = t - i;
    const QColor a = stops[static_cast<std::size_t>(i)], b = stops[static_cast<std::size_t>(i + 1)];
    return QColor::fromRgbF(static_cast<float>(a.redF() + f * (b.redF() - a.redF())),
                            static_cast<float>(a.greenF() + f * (b.greenF() - a.greenF())),
                            static_cast<float>(a.blueF() + f * (b.blueF() - a.blueF())));
}

void style_chart(QChart* chart) {
    const QPalette pal = QApplication::palette();
    chart->setTheme(dark_theme() ? QChart::ChartThemeDark : QChart::ChartThemeLight);
    chart->setBackgroundBrush(pal.color(QPalette::Base));
    chart->setBackgroundRoundness(0);
    chart->setPlotAreaBackgroundVisible(false);
    chart->setTitleBrush(pal.color(QPalette::Text));
    QFont f = QApplication::font();
    f.setBold(true);
    chart->setTitleFont(f);
    chart->setMargins(QMargins(4, 2, 4, 2));
    chart->layout()->setContentsMargins(0, 0, 0, 0);
    chart->legend()->setLabelColor(pal.color(QPalette::Text));
    QFont lf = QApplication::font();
    lf.setPointSizeF(lf.pointSizeF() * 0.9);
    chart->legend()->setFont(lf);
}

}  // namespace mwb::app
