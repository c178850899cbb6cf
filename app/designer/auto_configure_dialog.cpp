#include "designer/auto_configure_dialog.h"

#include "designer/layout_model.h"

#include <QDialogButtonBox>
#include <QFormLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QTableView>
#include <QVBoxLayout>
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
    auto* again = new QPushButton(tr("Search again"));
    opts->addWidget(new QLabel(tr("Show the best")));
    opts->addWidget(top_);
    opts->addWidget(new QLabel(tr("Largest TP")));
    opts->addWidget(max_tp_);
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
    const planner::Cluster cluster = cluster_;
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
    if (result_.ranked.empty()) s = tr("No layout of this model fits on this cluster. ") + s;
    summary_->setText(s);
    if (!result_.ranked.empty()) selectRow(0);
    apply_->setEnabled(!result_.ranked.empty());
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
