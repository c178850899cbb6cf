#include "app/launch/launch_view.h"

#include "app/core/config_file.h"
#include "app/core/format.h"
#include "app/core/paths.h"
#include "app/core/theme.h"
#include "app/launch/attach_panel.h"
#include "app/launch/local_run.h"
#include "app/launch/prediction.h"
#include "mwb/planner/search.h"

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFontDatabase>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QProcess>
#include <QPushButton>
#include <QSaveFile>
#include <QHash>
#include <QRegularExpression>
#include <QScrollBar>
#include <QSpinBox>
#include <QSplitter>
#include <QVBoxLayout>

#include <unistd.h>

namespace mwb::app {

namespace {

/// Local runs beyond this many ranks are surely a cluster design (Slurm), not this machine.
constexpr int kMaxLocalRanks = 64;

QPlainTextEdit* monospace_pane(const QString& name) {
    auto* t = new QPlainTextEdit;
    t->setObjectName(name);
    t->setReadOnly(true);
    t->setLineWrapMode(QPlainTextEdit::NoWrap);
    t->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    return t;
}

}  // namespace

LaunchView::LaunchView(QWidget* parent) : QWidget(parent) {
    run_ = new LocalRun(this);
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(6, 6, 6, 0);
    design_ = new QLabel;
    design_->setObjectName(QStringLiteral("launch_design"));
    design_->setWordWrap(true);
    design_->setTextFormat(Qt::RichText);
    outer->addWidget(design_);
    auto* split = new QSplitter(Qt::Horizontal);
    split->setObjectName(QStringLiteral("launch_split"));
    split->addWidget(buildLocal());
    split->addWidget(buildSlurm());
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 1);
    outer->addWidget(split, 1);

    connect(run_, &LocalRun::output, this, [this](const QString& text) {
        // append without adding line breaks of our own (the output arrives in arbitrary chunks)
        QScrollBar* bar = console_->verticalScrollBar();
        const bool at_end = bar->value() >= bar->maximum() - 4;
        QTextCursor c(console_->document());
        c.movePosition(QTextCursor::End);
        c.insertText(text);
        if (at_end) bar->setValue(bar->maximum());
    });
    connect(run_, &LocalRun::finished, this, [this](int code, bool crashed, const QString& description) {
        setStatus(tr("Run %1 — %2").arg(QDir(run_dir_).dirName(), description),
                  code == 0 && !crashed ? ok_color() : (code == 3 || code == 130 ? warning_color() : error_color()));
        refresh();
        emit runEnded(code, crashed, description);
        emit message(tr("Local run %1").arg(description));
    });
    refresh();
}

QWidget* LaunchView::buildLocal() {
    auto* w = new QWidget;
    auto* v = new QVBoxLayout(w);
    v->setContentsMargins(0, 0, 6, 0);
    auto* box = new QGroupBox(tr("Run on this machine"));
    auto* form = new QFormLayout(box);
    form->setLabelAlignment(Qt::AlignRight | Qt::AlignVCenter);
    name_ = new QLineEdit(QStringLiteral("gpt"));
    name_->setObjectName(QStringLiteral("launch_name"));
    name_->setToolTip(tr("The run directory is %1/<date>-<time>-<name>").arg(to_qstring(runs_root())));
    device_ = new QComboBox;
    device_->setObjectName(QStringLiteral("launch_device"));
    device_->addItem(tr("CPU"), QStringLiteral("cpu"));
    device_->addItem(tr("GPU if there is one (auto)"), QStringLiteral("auto"));
    device_->addItem(tr("GPU (cuda)"), QStringLiteral("cuda"));
    threads_ = new QSpinBox;
    threads_->setObjectName(QStringLiteral("launch_threads"));
    threads_->setRange(0, 1024);
    threads_->setSpecialValueText(tr("auto (cores ÷ ranks)"));
    extra_ = new QLineEdit;
    extra_->setObjectName(QStringLiteral("launch_extra"));
    extra_->setPlaceholderText(tr("more mwb-train flags, e.g. --train-iters 50"));
    command_ = new QLabel;
    command_->setObjectName(QStringLiteral("launch_command"));
    command_->setWordWrap(true);
    command_->setTextFormat(Qt::PlainText);
    command_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    command_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    command_->setMinimumWidth(200);
    form->addRow(tr("Run name"), name_);
    form->addRow(tr("Device"), device_);
    form->addRow(tr("Threads per rank"), threads_);
    form->addRow(tr("Extra flags"), extra_);
    form->addRow(tr("Command"), command_);
    auto* buttons = new QHBoxLayout;
    start_ = new QPushButton(tr("Start run"));
    start_->setObjectName(QStringLiteral("launch_start"));
    start_->setToolTip(tr("Save the design into a new run directory and start it; the Monitor follows it (Ctrl+R)"));
    stop_ = new QPushButton(tr("Stop"));
    stop_->setObjectName(QStringLiteral("launch_stop"));
    stop_->setToolTip(tr("SIGTERM: mwb-train checkpoints and exits; killed if still running after 15 s"));
    kill_ = new QPushButton(tr("Kill"));
    kill_->setObjectName(QStringLiteral("launch_kill"));
    kill_->setToolTip(tr("SIGKILL, at once"));
    buttons->addWidget(start_);
    buttons->addWidget(stop_);
    buttons->addWidget(kill_);
    buttons->addStretch(1);
    form->addRow(buttons);
    status_ = new QLabel(tr("No run started."));
    status_->setObjectName(QStringLiteral("launch_status"));
    status_->setWordWrap(true);
    form->addRow(status_);
    v->addWidget(box);
    auto* cbox = new QGroupBox(tr("Console"));
    auto* cv = new QVBoxLayout(cbox);
    console_ = monospace_pane(QStringLiteral("launch_console"));
    console_->setMaximumBlockCount(20000);
    console_->setLineWrapMode(QPlainTextEdit::WidgetWidth);  // long lines wrap (tracebacks, paths)
    console_->setPlaceholderText(tr("mwb-train's output appears here."));
    cv->addWidget(console_);
    v->addWidget(cbox, 1);

    connect(start_, &QPushButton::clicked, this, [this] {
        QString error;
        if (!startLocal(&error)) {
            setStatus(error, error_color());
            emit message(error);
        }
    });
    connect(stop_, &QPushButton::clicked, this, &LaunchView::stop);
    connect(kill_, &QPushButton::clicked, this, &LaunchView::kill);
    for (QLineEdit* e : {name_, extra_}) connect(e, &QLineEdit::textChanged, this, &LaunchView::refresh);
    connect(device_, &QComboBox::currentIndexChanged, this, &LaunchView::refresh);
    connect(threads_, &QSpinBox::valueChanged, this, &LaunchView::refresh);
    return w;
}

QWidget* LaunchView::buildSlurm() {
    auto* w = new QWidget;
    auto* v = new QVBoxLayout(w);
    v->setContentsMargins(6, 0, 0, 0);
    auto* box = new QGroupBox(tr("Cluster job (Slurm)"));
    auto* bv = new QVBoxLayout(box);
    auto* form = new QFormLayout;
    form->setLabelAlignment(Qt::AlignRight | Qt::AlignVCenter);
    const SlurmOptions d;
    job_ = new QLineEdit(d.job_name);
    job_->setObjectName(QStringLiteral("slurm_job"));
    partition_ = new QLineEdit;
    partition_->setPlaceholderText(tr("default partition"));
    account_ = new QLineEdit;
    account_->setPlaceholderText(tr("default account"));
    time_ = new QLineEdit(d.time_limit);
    trainer_ = new QLineEdit(d.trainer);
    trainer_->setToolTip(tr("mwb-train's path on the cluster"));
    run_root_ = new QLineEdit(d.run_root);
    key_dir_ = new QLineEdit(d.key_dir);
    key_dir_->setToolTip(tr("On the cluster: run.key_secret (the job's key pair) and clients/*.key (who may watch)"));
    port_ = new QSpinBox;
    port_->setObjectName(QStringLiteral("slurm_port"));
    port_->setRange(1024, 65533);
    port_->setValue(d.port);
    port_->setToolTip(tr("Telemetry port on the head node; snapshots use port + 1, control port + 2"));
    auto* row1 = new QHBoxLayout;
    row1->addWidget(job_);
    row1->addWidget(new QLabel(tr("Time")));
    row1->addWidget(time_);
    form->addRow(tr("Job name"), row1);
    auto* row2 = new QHBoxLayout;
    row2->addWidget(partition_);
    row2->addWidget(new QLabel(tr("Account")));
    row2->addWidget(account_);
    form->addRow(tr("Partition"), row2);
    form->addRow(tr("mwb-train"), trainer_);
    auto* row3 = new QHBoxLayout;
    row3->addWidget(run_root_, 2);
    row3->addWidget(new QLabel(tr("Keys")));
    row3->addWidget(key_dir_, 2);
    row3->addWidget(new QLabel(tr("Port")));
    row3->addWidget(port_);
    form->addRow(tr("Run root"), row3);
    bv->addLayout(form);
    script_ = monospace_pane(QStringLiteral("slurm_script"));
    bv->addWidget(script_, 3);
    checkpoints_ = new QLabel;
    checkpoints_->setObjectName(QStringLiteral("slurm_checkpoints"));
    checkpoints_->setWordWrap(true);
    checkpoints_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    bv->addWidget(checkpoints_);
    auto* save = new QPushButton(tr("Save script…"));
    save->setObjectName(QStringLiteral("slurm_save"));
    auto* srow = new QHBoxLayout;
    srow->addWidget(new QLabel(tr("Connection details")));
    srow->addStretch(1);
    srow->addWidget(save);
    bv->addLayout(srow);
    details_ = monospace_pane(QStringLiteral("slurm_details"));
    details_->setLineWrapMode(QPlainTextEdit::WidgetWidth);
    bv->addWidget(details_, 2);
    v->addWidget(box, 1);
    attach_ = new AttachPanel;
    v->addWidget(attach_);
    connect(attach_, &AttachPanel::attachRequested, this, &LaunchView::attachRequested);
    connect(save, &QPushButton::clicked, this, &LaunchView::saveSlurmScript);
    for (QLineEdit* e : {job_, partition_, account_, time_, trainer_, run_root_, key_dir_})
        connect(e, &QLineEdit::textChanged, this, &LaunchView::refresh);
    connect(port_, &QSpinBox::valueChanged, this, &LaunchView::refresh);
    return w;
}

void LaunchView::setDesign(const Config& config, const planner::Cluster& cluster, const planner::Plan& plan) {
    const bool device_changed = cluster.device.name != cluster_.device.name;
    config_ = config;
    cluster_ = cluster;
    plan_ = plan;
    if (device_changed && !running())
        device_->setCurrentIndex(
            device_->findData(cluster.device.name == "cpu" ? QStringLiteral("cpu") : QStringLiteral("auto")));
    refresh();
}

bool LaunchView::localCommand(const QString& run_dir, const QString& config_file, LocalLaunch& out,
                              QString* error) const {
    LocalLaunchInputs in;
    in.trainer = find_trainer();
    in.mpirun = find_mpirun();
    in.config_file = config_file;
    in.run_dir = run_dir;
    in.world = config_file.isEmpty() ? 1 : cluster_.world_size();
    in.cores = local_cores();
    in.threads = threads_->value();
    in.as_root = ::geteuid() == 0;
    in.extra << QStringLiteral("--device") << device_->currentData().toString();
    // MFU in the step records against the same peak the planner's prediction uses
    if (!config_file.isEmpty() && config_.telemetry.peak_tflops_per_device <= 0) {
        const double peak = device_peak_tflops(cluster_.device, config_);
        if (peak > 0) in.extra << QStringLiteral("--peak-tflops-per-device") << QString::number(peak, 'g', 6);
    }
    in.extra << QProcess::splitCommand(extra_->text());
    if (in.world > kMaxLocalRanks) {
        if (error)
            *error = tr("this design has %1 ranks: a cluster job (see the Slurm script), not a run on this machine")
                         .arg(in.world);
        return false;
    }
    return local_launch(in, out, error);
}

bool LaunchView::startLocal(QString* error) {
    if (!plan_.issues.empty()) {
        QStringList problems;
        for (const auto& i : plan_.issues)
            if (planner::is_layout_field(i.field)) problems << QString::fromStdString(i.field + ": " + i.message);
        if (!problems.isEmpty()) {
            if (error)
                *error = tr("the design has problems (see the Designer): %1").arg(problems.join(QStringLiteral("; ")));
            return false;
        }
    }
    const QString dir = to_qstring(new_run_dir(name_->text()));
    const QString file = dir + QStringLiteral("/config.json");
    LocalLaunch launch;
    if (!localCommand(dir, file, launch, error)) return false;
    try {
        QDir().mkpath(dir);
        Config c = config_;
        c.logging.run_dir.clear();  // --run-dir names it
        save_config_file(to_path(file), c);
    } catch (const std::exception& e) {
        if (error) *error = QString::fromUtf8(e.what());
        return false;
    }
    return start(launch, error);
}

bool LaunchView::startDemo(QString* error) {
    const QString dir = to_qstring(new_run_dir(QStringLiteral("demo")));
    LocalLaunch launch;
    LocalLaunchInputs in;
    in.trainer = find_trainer();
    in.run_dir = dir;
    in.cores = local_cores();
    in.extra << QStringLiteral("--device") << QStringLiteral("cpu");
    if (!local_launch(in, launch, error)) return false;
    return start(launch, error);
}

bool LaunchView::start(const LocalLaunch& launch, QString* error) {
    console_->clear();
    if (!run_->start(launch, error)) return false;
    run_dir_ = launch.run_dir;
    setStatus(tr("Running %1 (%2 rank%3, pid %4) in %5")
                  .arg(QDir(run_dir_).dirName())
                  .arg(launch.world)
                  .arg(launch.world == 1 ? QString() : QStringLiteral("s"))
                  .arg(run_->pid())
                  .arg(run_dir_),
              palette().color(QPalette::WindowText));
    refresh();
    emit runStarted(run_dir_, launch.world);
    emit message(tr("Started %1").arg(launch.display()));
    return true;
}

void LaunchView::stop() {
    if (!running()) return;
    run_->stop();
    setStatus(tr("Stopping (SIGTERM; mwb-train checkpoints and exits)…"), warning_color());
}

void LaunchView::kill() {
    run_->kill();
}

bool LaunchView::running() const {
    return run_->running();
}

QString checkpoint_location(const QString& script) {
    // What the script itself says: --save on the command line (its shell variables expanded from the
    // script's own assignments, e.g. CKPT="$RUN_DIR/checkpoints"), "save" in the embedded config, else
    // the run directory's checkpoints/ (docs/run-directory.md).
    static const QRegularExpression flag(QStringLiteral("--save[= ]+(\"[^\"]+\"|'[^']+'|\\S+)"));
    static const QRegularExpression key(QStringLiteral("\"save\"\\s*:\\s*\"([^\"]+)\""));
    static const QRegularExpression assignment(QStringLiteral("^\\s*([A-Za-z_][A-Za-z0-9_]*)=(\\S+)\\s*$"),
                                               QRegularExpression::MultilineOption);
    static const QRegularExpression variable(QStringLiteral("\\$\\{?([A-Za-z_][A-Za-z0-9_]*)\\}?"));
    const auto unquote = [](QString v) {
        if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'')) v = v.mid(1, v.size() - 2);
        return v;
    };
    QHash<QString, QString> vars;
    for (auto it = assignment.globalMatch(script); it.hasNext();) {
        const auto m = it.next();
        vars.insert(m.captured(1), unquote(m.captured(2)));
    }
    const auto expand = [&](QString v) {
        for (int round = 0; round < 8 && v.contains('$'); ++round) {  // nested assignments, bounded
            QString out;
            qsizetype last = 0;
            for (auto it = variable.globalMatch(v); it.hasNext();) {
                const auto m = it.next();
                out += v.mid(last, m.capturedStart() - last);
                out += vars.contains(m.captured(1)) ? vars.value(m.captured(1)) : m.captured(0);
                last = m.capturedEnd();
            }
            out += v.mid(last);
            if (out == v) break;
            v = out;
        }
        return v;
    };
    QString commands;  // the script without its comments ("# ... both --save and --load")
    for (const QString& line : script.split('\n'))
        if (!line.trimmed().startsWith('#')) commands += line + '\n';
    if (const auto m = flag.match(commands); m.hasMatch()) return expand(unquote(m.captured(1)));
    if (const auto m = key.match(script); m.hasMatch()) return m.captured(1);
    if (vars.contains(QStringLiteral("RUN_DIR")))
        return QObject::tr("$RUN_DIR/checkpoints/iter_NNNNNNN/ (RUN_DIR=%1 on the cluster)")
            .arg(expand(vars.value(QStringLiteral("RUN_DIR"))));
    return QObject::tr("the run directory's checkpoints/iter_NNNNNNN/");
}

SlurmOptions LaunchView::slurmOptions() const {
    SlurmOptions o;
    o.job_name = job_->text().trimmed().isEmpty() ? QStringLiteral("mwb") : job_->text().trimmed();
    o.partition = partition_->text().trimmed();
    o.account = account_->text().trimmed();
    o.time_limit = time_->text().trimmed();
    o.trainer = trainer_->text().trimmed();
    o.run_root = run_root_->text().trimmed();
    o.key_dir = key_dir_->text().trimmed();
    o.port = port_->value();
    o.nodes = std::max(1, cluster_.nodes);
    o.gpus_per_node = std::max(1, cluster_.gpus_per_node);
    o.peak_tflops = device_peak_tflops(cluster_.device, config_);
    o.gpus = cluster_.device.name != "cpu";
    if (plan_.estimated) o.iteration_seconds = plan_.time.iteration_s;  // the checkpoint plan's interval
    return o;
}

QString LaunchView::slurmScript() const {
    Config c = config_;
    c.logging.run_dir.clear();
    return slurm_script(c, slurmOptions());
}

QString LaunchView::connectionDetails() const {
    return slurm_connection_details(slurmOptions());
}

QString LaunchView::console() const {
    return console_->toPlainText();
}

QString LaunchView::status() const {
    return status_->text();
}

void LaunchView::saveSlurmScript() {
    const QString path = QFileDialog::getSaveFileName(this, tr("Save the Slurm batch script"),
                                                      slurmOptions().job_name + QStringLiteral(".sbatch"),
                                                      tr("Batch scripts (*.sbatch *.sh);;All files (*)"));
    if (path.isEmpty()) return;
    QSaveFile f(path);
    if (!f.open(QIODevice::WriteOnly) || f.write(slurmScript().toUtf8()) < 0 || !f.commit()) {
        QMessageBox::warning(this, tr("Cannot save"), tr("%1: %2").arg(path, f.errorString()));
        return;
    }
    emit message(tr("Saved %1 (submit it with sbatch %1)").arg(path));
}

void LaunchView::setStatus(const QString& text, const QColor& color) {
    status_->setText(text);
    QPalette p = status_->palette();
    p.setColor(QPalette::WindowText, color);
    status_->setPalette(p);
}

void LaunchView::refresh() {
    const bool busy = running();
    start_->setEnabled(!busy);
    stop_->setEnabled(busy);
    kill_->setEnabled(busy);
    QString summary;
    if (plan_.estimated) {
        summary = tr("<b>Design</b>: %1 parameters · %2 on %3 × %4 · predicted %5 per iteration, %6 tokens/s")
                      .arg(format_count(static_cast<double>(plan_.parameters.total)),
                           QString::fromStdString(planner::describe_layout(plan_)))
                      .arg(cluster_.world_size())
                      .arg(QString::fromStdString(cluster_.device.name), format_duration(plan_.time.iteration_s),
                           format_count(plan_.time.tokens_per_s));
    } else {
        summary = tr("<b>Design</b>: no estimate (see the Designer's problems)");
    }
    design_->setText(summary);
    if (!busy) {
        LocalLaunch launch;
        QString error;
        const QString dir = to_qstring(runs_root()) + QStringLiteral("/<new>");
        command_->setText(localCommand(dir, dir + QStringLiteral("/config.json"), launch, &error)
                              ? launch.display()
                              : tr("(cannot run here: %1)").arg(error));
    }
    const int scroll = script_->verticalScrollBar()->value();
    const QString script = slurmScript();
    script_->setPlainText(script);
    script_->verticalScrollBar()->setValue(scroll);
    checkpoints_->setText(tr("Checkpoints go to %1").arg(checkpoint_location(script)));
    details_->setPlainText(connectionDetails());
}

}  // namespace mwb::app
