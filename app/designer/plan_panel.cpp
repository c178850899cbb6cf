#include "app/designer/plan_panel.h"

#include "app/core/format.h"
#include "app/core/theme.h"
#include "mwb/planner/report.h"
#include "mwb/planner/search.h"
#include "app/plot/memory_bars.h"
#include "app/plot/stacked_bar.h"

#include <QDoubleSpinBox>
#include <QGridLayout>
#include <QGroupBox>
#include <QLabel>
#include <QListWidget>
#include <QVBoxLayout>

namespace mwb::app {

namespace {

QLabel* small_title(const QString& text) {
    auto* l = new QLabel(text);
    QFont f = l->font();
    f.setBold(true);
    l->setFont(f);
    return l;
}

}  // namespace

PlanPanel::PlanPanel(QWidget* parent) : QWidget(parent) {
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(8, 4, 8, 4);
    headline_ = new QLabel;
    headline_->setObjectName(QStringLiteral("plan_headline"));
    headline_->setWordWrap(true);
    headline_->setTextFormat(Qt::RichText);
    QFont hf = headline_->font();
    hf.setPointSizeF(hf.pointSizeF() * 1.15);
    headline_->setFont(hf);
    v->addWidget(headline_);

    auto* figures = new QGroupBox(tr("Prediction"));
    grid_ = new QGridLayout(figures);
    grid_->setHorizontalSpacing(14);
    grid_->setVerticalSpacing(3);
    addFigure("layout", tr("Layout"), 0, 0);
    addFigure("parameters", tr("Parameters"), 1, 0);
    addFigure("parameters_rank", tr("Per rank (most)"), 2, 0);
    addFigure("flops", tr("FLOPs / iteration"), 3, 0);
    addFigure("micro_batches", tr("Micro-batches"), 4, 0);
    addFigure("iteration_time", tr("Iteration time"), 0, 2);
    addFigure("tokens_per_s", tr("Tokens / s"), 1, 2);
    addFigure("tflops", tr("TFLOP/s per device"), 2, 2);
    addFigure("mfu", tr("MFU / HFU"), 3, 2);
    addFigure("bubble", tr("Pipeline bubble"), 4, 2);
    addFigure("days", tr("Days to train"), 5, 0);
    tokens_ = new QDoubleSpinBox;
    tokens_->setObjectName(QStringLiteral("train_tokens"));
    tokens_->setRange(0, 1e6);
    tokens_->setDecimals(1);
    tokens_->setSuffix(tr(" B tokens"));
    tokens_->setSpecialValueText(tr("the configured iterations"));
    tokens_->setToolTip(
        tr("Tokens to train, in billions, for the days estimate (0: train_iters × global batch × sequence)"));
    grid_->addWidget(new QLabel(tr("for")), 5, 2, Qt::AlignRight);
    grid_->addWidget(tokens_, 5, 3);
    grid_->setColumnStretch(1, 1);
    grid_->setColumnStretch(3, 1);
    connect(tokens_, &QDoubleSpinBox::valueChanged, this, &PlanPanel::trainTokensChanged);
    v->addWidget(figures);

    auto* mem = new QGroupBox(tr("Memory per device, by pipeline stage (peak)"));
    auto* mv = new QVBoxLayout(mem);
    memory_ = new MemoryBars;
    memory_->setObjectName(QStringLiteral("plan_memory"));
    memory_->setEmptyText(tr("No estimate: fix the problems listed below."));
    mv->addWidget(memory_);
    v->addWidget(mem);

    auto* tb = new QGroupBox(tr("Iteration time, predicted"));
    auto* tv = new QVBoxLayout(tb);
    time_ = new StackedBar;
    time_->setObjectName(QStringLiteral("plan_time"));
    tv->addWidget(time_);
    comm_ = new QLabel;
    comm_->setWordWrap(true);
    comm_->setObjectName(QStringLiteral("plan_comm"));
    tv->addWidget(comm_);
    v->addWidget(tb);

    v->addWidget(small_title(tr("Problems")));
    issues_ = new QListWidget;
    issues_->setObjectName(QStringLiteral("plan_issues"));
    issues_->setWordWrap(true);
    issues_->setMinimumHeight(60);
    issues_->setMaximumHeight(160);
    issues_->setToolTip(tr("Click a problem to go to its field"));
    connect(issues_, &QListWidget::itemActivated, this,
            [this](QListWidgetItem* i) { emit issueActivated(i->data(Qt::UserRole).toString()); });
    connect(issues_, &QListWidget::itemClicked, this,
            [this](QListWidgetItem* i) { emit issueActivated(i->data(Qt::UserRole).toString()); });
    v->addWidget(issues_);
    notes_ = new QLabel;
    notes_->setWordWrap(true);
    notes_->setObjectName(QStringLiteral("plan_notes"));
    v->addWidget(notes_);
    v->addStretch(1);
}

void PlanPanel::addFigure(const QString& key, const QString& label, int row, int col) {
    auto* name = new QLabel(label);
    name->setForegroundRole(QPalette::PlaceholderText);
    auto* value = new QLabel(QStringLiteral("—"));
    value->setObjectName(QStringLiteral("plan_") + key);
    value->setTextInteractionFlags(Qt::TextSelectableByMouse);
    QFont f = value->font();
    f.setBold(true);
    value->setFont(f);
    grid_->addWidget(name, row, col);
    grid_->addWidget(value, row, col + 1);
    figures_.insert(key, value);
}

void PlanPanel::setFigure(const QString& key, const QString& value, const QString& tip) {
    if (QLabel* l = figures_.value(key)) {
        l->setText(value);
        l->setToolTip(tip);
    }
}

QString PlanPanel::figure(const QString& key) const {
    const QLabel* l = figures_.value(key);
    return l ? l->text() : QString();
}

QString PlanPanel::headline() const {
    return headline_->text();
}

int PlanPanel::issueCount() const {
    return issue_count_;
}

double PlanPanel::trainTokens() const {
    return tokens_->value() * 1e9;
}

void PlanPanel::showPlan(const planner::Plan& p) {
    const QString device = QString::fromStdString(p.cluster.device.name);
    const double limit = static_cast<double>(p.memory_limit);
    // headline
    if (!p.estimated) {
        headline_->setText(QStringLiteral("<span style='color:%1'>✘ No estimate</span> — %2")
                               .arg(error_color().name(), tr("the model or layout has problems (below)")));
    } else {
        const auto& s = p.most_loaded();
        const double peak = static_cast<double>(s.peak_total);
        if (p.fits) {
            headline_->setText(
                QStringLiteral("<span style='color:%1'>✔ Fits</span> — %2 of %3 per %4 (stage %5 is the most loaded)")
                    .arg(ok_color().name(), format_bytes(peak), limit > 0 ? format_bytes(limit) : tr("(unchecked)"),
                         device)
                    .arg(s.stage));
        } else {
            headline_->setText(
                QStringLiteral("<span style='color:%1'>✘ Does not fit</span> — stage %2 needs %3 per %4; %5 usable")
                    .arg(error_color().name())
                    .arg(s.stage)
                    .arg(format_bytes(peak), device, format_bytes(limit)));
        }
    }

    // figures
    if (p.estimated) {
        const auto& t = p.time;
        setFigure("layout", QString::fromStdString(planner::describe_layout(p)));
        setFigure("parameters", format_count(static_cast<double>(p.parameters.total)),
                  tr("%1 parameters; per layer %2")
                      .arg(format_int(p.parameters.total))
                      .arg(format_count(static_cast<double>(p.parameters.per_layer))));
        setFigure("parameters_rank", format_count(static_cast<double>(p.parameters.max_per_rank())));
        setFigure("flops", format_flops(p.flops.model),
                  tr("model FLOPs %1, hardware FLOPs (with recomputation) %2")
                      .arg(format_flops(p.flops.model), format_flops(p.flops.hardware)));
        setFigure("micro_batches", QString::number(p.layout.micro_batches));
        setFigure("iteration_time", format_duration(t.iteration_s));
        setFigure("tokens_per_s", format_count(t.tokens_per_s));
        setFigure("tflops", QString::number(t.model_flops_per_s_per_device / 1e12, 'f', 1),
                  tr("model FLOP/s per device; peak %1/s at efficiency %2")
                      .arg(format_flops(t.peak_flops))
                      .arg(t.compute_efficiency));
        setFigure("mfu", format_percent(t.mfu) + " / " + format_percent(t.hfu));
        setFigure("bubble", format_percent(t.bubble_fraction), tr("(p − 1)/(v·m) of the pipeline time"));
        setFigure("days", QString::number(t.days, 'f', t.days < 10 ? 2 : 1),
                  tr("%1 tokens at %2 tokens/s").arg(format_count(t.train_tokens), format_count(t.tokens_per_s)));
        time_->setSegments({{tr("compute"), t.compute_s, compute_color()},
                            {tr("TP/SP comm"), t.tp_s, communication_color()},
                            {tr("PP sends"), t.pp_s, series_color(4)},
                            {tr("bubble"), t.bubble_s, bubble_color()},
                            {tr("DP reduce"), t.dp_s, series_color(2)},
                            {tr("embedding"), t.embedding_s, series_color(6)},
                            {tr("optimizer"), t.optimizer_s, series_color(7)}},
                           [](double s) { return format_duration(s); });
        const auto bytes = p.max_bytes_sent();
        QStringList parts;
        for (int g = 0; g < planner::kGroups; ++g)
            if (bytes[static_cast<std::size_t>(g)] > 0)
                parts << QStringLiteral("%1 %2").arg(
                    QString::fromUtf8(planner::group_name(static_cast<planner::Group>(g)).data()),
                    format_bytes(static_cast<double>(bytes[static_cast<std::size_t>(g)])));
        comm_->setText(parts.isEmpty()
                           ? tr("No communication (one rank).")
                           : tr("Sent per iteration by the busiest rank: ") + parts.join(QStringLiteral(" · ")));
    } else {
        for (auto it = figures_.begin(); it != figures_.end(); ++it) it.value()->setText(QStringLiteral("—"));
        time_->setSegments({}, {});
        comm_->clear();
    }

    // memory per stage
    std::vector<MemoryBar> bars;
    if (p.estimated) {
        for (const auto& s : p.memory) {
            MemoryBar b;
            b.label = tr("stage %1").arg(s.stage);
            std::array<double, kCategories> cur{}, peak{};
            for (int c = 0; c < kCategories; ++c) {
                cur[static_cast<std::size_t>(c)] = static_cast<double>(s.current[static_cast<std::size_t>(c)]);
                peak[static_cast<std::size_t>(c)] = static_cast<double>(s.peak[static_cast<std::size_t>(c)]);
            }
            b.segments = stack_memory(cur, peak, static_cast<double>(s.peak_total));
            b.current = static_cast<double>(s.allocated);
            QString tip = tr("%1 layers, %2 micro-batches in flight<br>peak %3, between iterations %4<br>")
                              .arg(s.layers)
                              .arg(s.in_flight)
                              .arg(format_bytes(static_cast<double>(s.peak_total)),
                                   format_bytes(static_cast<double>(s.allocated)));
            for (int c = 0; c < kCategories; ++c)
                tip += QStringLiteral("%1: %2 now, %3 peak<br>")
                           .arg(category_label(c), format_bytes(cur[static_cast<std::size_t>(c)]),
                                format_bytes(peak[static_cast<std::size_t>(c)]));
            b.tooltip = tip;
            bars.push_back(b);
        }
    }
    memory_->setBars(std::move(bars), static_cast<double>(p.cluster.device.memory_bytes), limit);

    // problems and notes
    issues_->clear();
    issue_count_ = static_cast<int>(p.issues.size());
    for (const auto& i : p.issues) {
        auto* item = new QListWidgetItem(
            QStringLiteral("%1: %2").arg(QString::fromStdString(i.field), QString::fromStdString(i.message)));
        item->setData(Qt::UserRole, QString::fromStdString(i.field));
        item->setForeground(error_color());
        issues_->addItem(item);
    }
    if (p.issues.empty()) {
        auto* item = new QListWidgetItem(tr("None: mwb-train would accept this configuration on this cluster."));
        item->setForeground(ok_color());
        item->setFlags(Qt::ItemIsEnabled);
        issues_->addItem(item);
    }
    QStringList notes;
    for (const auto& n : p.notes) notes << QString::fromStdString(n);
    notes_->setText(notes.isEmpty() ? QString() : tr("Notes: ") + notes.join(QStringLiteral("; ")));
}

}  // namespace mwb::app
