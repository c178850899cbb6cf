#include "app/history/scatter_plot.h"

#include "app/core/theme.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>

#include <algorithm>
#include <set>

namespace mwb::app {

ScatterPlot::ScatterPlot(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    auto* bar = new QHBoxLayout;
    bar->addWidget(new QLabel(tr("Final loss against")));
    key_ = new QComboBox;
    key_->setObjectName(QStringLiteral("scatterKey"));
    key_->setMinimumContentsLength(24);
    bar->addWidget(key_);
    bar->addStretch(1);
    layout->addLayout(bar);
    plot_ = new PlotView(tr("Final training loss per run"));
    plot_->setObjectName(QStringLiteral("scatterPlot"));
    plot_->setYTitle(tr("final loss"));
    plot_->setXPadding(0.05);
    plot_->setEmptyText(tr("No two runs with a final loss differ in a numeric setting"));
    PlotView::LineStyle style = themed_line(0, 1);
    style.pen = Qt::NoPen;  // markers only
    style.markers = true;
    style.smooth = false;
    plot_->setTrace(plot_->addLine(tr("runs"), style), &points_);
    layout->addWidget(plot_, 1);
    connect(key_, &QComboBox::currentIndexChanged, this, [this] { rebuild(); });
}

void ScatterPlot::setRows(const std::vector<const RunRow*>& rows) {
    rows_.clear();
    for (const RunRow* r : rows)
        if (r->final_loss) rows_.push_back(*r);
    // numeric settings whose values differ among these runs
    std::map<std::string, std::set<double>> values;
    for (const RunRow& r : rows_)
        for (const auto& [k, v] : r.settings)
            if (const auto n = setting_number(r, k)) values[k].insert(*n);
    QStringList keys;
    for (const auto& [k, vs] : values)
        if (vs.size() > 1) keys << QString::fromStdString(k);
    const QString current = key_->currentText();
    {
        const QSignalBlocker block(key_);
        key_->clear();
        key_->addItems(keys);
        const int i = key_->findText(current);
        key_->setCurrentIndex(i >= 0 ? i : keys.indexOf(QStringLiteral("lr")) >= 0 ? keys.indexOf(QStringLiteral("lr")) : 0);
    }
    rebuild();
}

void ScatterPlot::setKey(const QString& key) {
    const int i = key_->findText(key);
    if (i >= 0) key_->setCurrentIndex(i);
}

QString ScatterPlot::key() const {
    return key_->currentText();
}

void ScatterPlot::rebuild() {
    std::vector<std::pair<double, double>> pts;
    const std::string k = key().toStdString();
    for (const RunRow& r : rows_)
        if (const auto x = setting_number(r, k)) pts.emplace_back(*x, *r.final_loss);
    std::sort(pts.begin(), pts.end());
    points_.clear();
    for (const auto& [x, y] : pts) points_.append(x, y);
    plot_->setXTitle(key());
    plot_->setTrace(0, &points_);
    plot_->followAll();
}

}  // namespace mwb::app
