#pragma once
// Light and dark palettes (Fusion style) and the colours every chart shares: one colour per memory
// category, per time component and per compared run, chosen to stay readable on both backgrounds.
#include <QColor>
#include <QString>

class QChart;

namespace mwb::app {

enum class Theme { Light, Dark };

/// Applies the palette (Fusion style) to the application; charts follow through style_chart().
void apply_theme(Theme theme);
Theme current_theme();
bool dark_theme();
QString theme_name(Theme theme);
Theme theme_from_name(const QString& name);

/// The memory categories of the allocator, in its order: weights, gradients, optimizer,
/// activations, workspace, data.
QColor category_color(int category);
/// Distinct colours for runs in a comparison, lines in a chart (cycles after 10).
QColor series_color(int index);
/// Colours of the step-time breakdown: compute, communication, bubble.
QColor compute_color();
QColor communication_color();
QColor bubble_color();
/// Text colour for problems and for success, readable in both palettes.
QColor error_color();
QColor ok_color();
QColor warning_color();
/// A colour on a perceptually ordered ramp (viridis-like) for t in [0, 1].
QColor ramp_color(double t);

/// Sets a chart's theme, background and fonts for the current palette.
void style_chart(QChart* chart);

}  // namespace mwb::app
