#include "app/designer/auto_configure_dialog.h"

#include "app/core/format.h"
#include "app/designer/layout_model.h"

#include <QDialogButtonBox>
#include <QFormLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QTableView>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <QtConcurrent>

namespace mwb::app {

namespace {

QTableView* make_table(QAbstractItemModel* model) {
    auto* t = new QTableView;
    t->setModel(model);
    t->setSelectionBehavior(QAbstractItemView::SelectRows);
    t->setSelectionMode(QAbstractItemView::SingleSelection);
    t->verticalHeader()->hide();
    t->setWordWrap(false);
    t->setAlternatingRowColors(true);
    t->horizontalHeader()->setStretchLastSection(true);
    return t;
}

}  // namespace

AutoConfigureDialog::AutoConfigureDialog(const Config& base, const planner::Cluster& cluster, QWidget* parent)
    : QDialog(parent), base_(base), cluster_(cluster) {
    setWindowTitle(tr("Auto-configure the parallel layout"));
    resize(1100, 620);
    auto* v = new QVBoxLayout(this);
    auto* intro =
        new QLabel(tr("Every layout of this model on %1 node%2 × %3 %4 (%5 devices): TP, PP, virtual stages, DP, "
                      "sequence parallelism, micro-batch, recomputation and the distributed optimizer. "
                      "Model, global batch and precision stay as designed.")
                       .arg(cluster.nodes)
                       .arg(cluster.nodes == 1 ? QString() : QStringLiteral("s"))
                       .arg(cluster.gpus_per_node)
                       .arg(QString::fromStdString(cluster.device.name))
                       .arg(cluster.world_size()));
    intro->setWordWrap(true);
    v->addWidget(intro);
    auto* opts = new QHBoxLayout;
    top_ = new QSpinBox;
    top_->setRange(1, 100);
    top_->setValue(12);
    max_tp_ = new QSpinBox;
    max_tp_->setRange(0, 64);
    max_tp_->setSpecialValueText(tr("devices per node"));
    headroom_ = new QSpinBox;
    headroom_->setObjectName(QStringLiteral("headroom"));
    headroom_->setRange(0, 50);
    headroom_->setSuffix(QStringLiteral(" %"));
    headroom_->setValue(5);
    headroom_->setToolTip(tr("Ranked layouts leave this share of the device's usable memory free (fragmentation, "
                             "a longer sequence, a library's workspace)"));
    auto* again = new QPushButton(tr("Search again"));
    opts->addWidget(new QLabel(tr("Show the best")));
    opts->addWidget(top_);
    opts->addWidget(new QLabel(tr("Largest TP")));
    opts->addWidget(max_tp_);
    opts->addWidget(new QLabel(tr("Memory headroom")));
    opts->addWidget(headroom_);
    opts->addWidget(again);
    opts->addStretch(1);
    v->addLayout(opts);
    connect(again, &QPushButton::clicked, this, &AutoConfigureDialog::start);

    model_ = new LayoutModel(this);
    table_ = make_table(model_);
    table_->setObjectName(QStringLiteral("ranked_layouts"));
    v->addWidget(table_, 3);
    summary_ = new QLabel(tr("Searching…"));
    summary_->setWordWrap(true);
    v->addWidget(summary_);
    ties_ = new QLabel;
    ties_->setObjectName(QStringLiteral("near_ties"));
    ties_->setWordWrap(true);
    v->addWidget(ties_);
    too_big_ = new LayoutModel(this);
    too_big_table_ = make_table(too_big_);
    too_big_table_->setSelectionMode(QAbstractItemView::NoSelection);
    v->addWidget(too_big_table_, 1);

    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Cancel);
    apply_ = buttons->addButton(tr("Apply layout"), QDialogButtonBox::AcceptRole);
    apply_->setEnabled(false);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(table_, &QTableView::doubleClicked, this, &QDialog::accept);
    v->addWidget(buttons);
    connect(&watcher_, &QFutureWatcher<planner::SearchResult>::finished, this, [this] {
        result_ = watcher_.result();
        showResult();
    });
    start();
}

AutoConfigureDialog::~AutoConfigureDialog() {
    watcher_.waitForFinished();
}

void AutoConfigureDialog::start() {
    if (watcher_.isRunning()) return;
    summary_->setText(tr("Searching…"));
    apply_->setEnabled(false);
    planner::SearchOptions o;
    o.top = top_->value();
    o.max_tp = max_tp_->value();
    const Config base = base_;
    // the headroom as less memory: what fits leaves that share of the usable memory free
    planner::Cluster cluster = cluster_;
    auto& d = cluster.device;
    if (d.memory_bytes > 0) {
        const double usable = static_cast<double>(d.memory_bytes - d.runtime_reserve_bytes);
        d.memory_bytes = d.runtime_reserve_bytes + static_cast<int64_t>(usable * (1 - headroom()));
    }
    watcher_.setFuture(QtConcurrent::run([base, cluster, o] {
        try {
            return planner::search(base, cluster, o);
        } catch (const std::exception&) {
            return planner::SearchResult{};
        }
    }));
}

void AutoConfigureDialog::waitForResult() {
    watcher_.waitForFinished();
    QCoreApplication::processEvents();
}

void AutoConfigureDialog::showResult() {
    model_->setLayouts(result_.ranked, true);
    too_big_->setLayouts(result_.too_big, false);
    table_->resizeColumnsToContents();
    too_big_table_->resizeColumnsToContents();
    QStringList rejected;
    for (const auto& r : result_.rejected)
        rejected << QStringLiteral("%1 × %2").arg(r.count).arg(QString::fromStdString(r.reason));
    QString s = tr("%1 layouts evaluated in %2 s; %3 run and fit.")
                    .arg(result_.evaluated)
                    .arg(result_.seconds, 0, 'f', 2)
                    .arg(result_.runnable);
    if (!rejected.isEmpty()) s += tr(" Rejected: ") + rejected.join(QStringLiteral(", ")) + ".";
    if (!result_.too_big.empty()) s += tr(" Below: the fastest layouts that do not fit.");
    s += tr(" Every ranked layout leaves %1 % of the usable memory free.").arg(headroom_->value());
    if (result_.ranked.empty()) s = tr("No layout of this model fits on this cluster. ") + s;
    summary_->setText(s);
    ties_->setText(explainTies());
    if (!result_.ranked.empty()) selectRow(0);
    apply_->setEnabled(!result_.ranked.empty());
}

void AutoConfigureDialog::setHeadroom(double fraction) {
    headroom_->setValue(static_cast<int>(std::lround(100 * fraction)));
}

double AutoConfigureDialog::headroom() const {
    return headroom_->value() / 100.0;
}

QString AutoConfigureDialog::nearTies() const {
    return ties_->text();
}

QString AutoConfigureDialog::explainTies() const {
    if (result_.ranked.size() < 2) return {};
    const planner::Plan& best = result_.ranked.front().plan;
    const double gib = 1024.0 * 1024 * 1024;
    QStringList lines;
    for (std::size_t i = 1; i < result_.ranked.size(); ++i) {
        const planner::Plan& p = result_.ranked[i].plan;
        const double behind = 1 - p.time.tokens_per_s / best.time.tokens_per_s;
        if (behind > 0.02) break;  // ranked by throughput: the rest are further behind
        QStringList why;
        const double mem = static_cast<double>(p.most_loaded().peak_total - best.most_loaded().peak_total) / gib;
        if (std::abs(mem) >= 0.05)
            why << (mem < 0 ? tr("%1 GiB less memory per device").arg(-mem, 0, 'f', 1)
                            : tr("%1 GiB more memory per device").arg(mem, 0, 'f', 1));
        // the time parts that differ most
        const std::pair<QString, double> parts[] = {{tr("compute"), p.time.compute_s - best.time.compute_s},
                                                    {tr("TP communication"), p.time.tp_s - best.time.tp_s},
                                                    {tr("pipeline sends"), p.time.pp_s - best.time.pp_s},
                                                    {tr("pipeline bubble"), p.time.bubble_s - best.time.bubble_s},
                                                    {tr("DP reduction"), p.time.dp_s - best.time.dp_s},
                                                    {tr("optimizer"), p.time.optimizer_s - best.time.optimizer_s}};
        std::vector<std::pair<QString, double>> sorted(std::begin(parts), std::end(parts));
        std::sort(sorted.begin(), sorted.end(),
                  [](const auto& a, const auto& b) { return std::abs(a.second) > std::abs(b.second); });
        for (std::size_t k = 0; k < 2 && k < sorted.size(); ++k)
            if (std::abs(sorted[k].second) > 1e-4 * best.time.iteration_s)
                why << tr("%1 %2 %3").arg(sorted[k].first, sorted[k].second > 0 ? tr("+") : tr("−"),
                                          format_duration(std::abs(sorted[k].second)));
        lines << tr("#%1 %2 is %3 % behind: %4")
                     .arg(i + 1)
                     .arg(QString::fromStdString(result_.ranked[i].summary))
                     .arg(100 * behind, 0, 'f', 1)
                     .arg(why.isEmpty() ? tr("the same predicted time and memory") : why.join(QStringLiteral(", ")));
    }
    if (lines.isEmpty()) return {};
    return tr("Within 2 % of the best (%1):\n").arg(QString::fromStdString(result_.ranked.front().summary)) +
           lines.join(QLatin1Char('\n'));
}

void AutoConfigureDialog::selectRow(int row) {
    table_->selectRow(row);
}

Config AutoConfigureDialog::chosen() const {
    Config c = base_;
    const auto rows = table_->selectionModel() ? table_->selectionModel()->selectedRows() : QModelIndexList{};
    if (rows.isEmpty() || result_.ranked.empty()) return c;
    apply_layout(c, model_->layout(rows.first().row()).plan.config);
    return c;
}

}  // namespace mwb::app
