#include "app/monitor/control_bar.h"

#include "app/core/theme.h"
#include "mwb/ipc/control_client.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QtConcurrent/QtConcurrentRun>

#include <chrono>
#include <fstream>

namespace mwb::app {

namespace {

std::string read_token(const std::filesystem::path& file) {
    std::ifstream in(file);
    if (!in) throw std::runtime_error("cannot read the control token file " + file.string());
    std::string token;
    std::getline(in, token);
    while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
    return token;
}

}  // namespace

ControlBar::ControlBar(QWidget* parent) : QWidget(parent) {
    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    const auto make = [this, layout](const QString& text, const QString& action, const QString& tip) {
        auto* b = new QPushButton(text);
        b->setObjectName(action);
        b->setToolTip(tip);
        connect(b, &QPushButton::clicked, this, [this, action] { send(action); });
        layout->addWidget(b);
        return b;
    };
    pause_ = make(tr("&Pause"), QStringLiteral("pause"), tr("Pause the run at the next iteration boundary"));
    resume_ = make(tr("&Resume"), QStringLiteral("resume"), tr("Continue a paused run"));
    checkpoint_ =
        make(tr("&Checkpoint now"), QStringLiteral("checkpoint"), tr("Save a checkpoint at the next iteration"));
    stop_ = make(tr("&Stop"), QStringLiteral("stop"), tr("Save a checkpoint and end the run (status: stopped)"));
    state_ = new QLabel;
    state_->setObjectName(QStringLiteral("controlState"));
    // a fixed width after the buttons: a longer answer never moves them (elided, full text as tooltip)
    state_->setFixedWidth(state_->fontMetrics().horizontalAdvance(QLatin1Char('x')) * 26);
    layout->addWidget(state_);
    connect(&watcher_, &QFutureWatcher<Reply>::finished, this, [this] {
        const Reply r = watcher_.result();
        const bool ok = r.error.isEmpty() && r.body.value("ok", false);
        QString text = r.error;
        if (text.isEmpty() && ok)
            text = r.body.contains("state") ? QString::fromStdString(r.body.value("state", std::string()))
                                            : tr("applied at iteration %1").arg(r.body.value("iteration", int64_t{-1}));
        if (text.isEmpty()) text = QString::fromStdString(r.body.value("error", std::string("refused")));
        if (ok) {  // the trainer's state after the request (only "status" replies carry it)
            if (r.body.contains("state") && r.body["state"].is_string())
                paused_ = r.body["state"] == "paused";
            else if (r.action == QLatin1String("pause"))
                paused_ = true;
            else if (r.action == QLatin1String("resume") || r.action == QLatin1String("stop"))
                paused_ = false;
        }
        if (r.action == QLatin1String("status") && ok)
            setState(paused_ ? tr("paused") : QString(), false);
        else
            setState(ok ? tr("%1: %2").arg(r.action, text) : tr("%1 failed: %2").arg(r.action, text), !ok);
        updateButtons();
        emit replied(r.action, ok, text);
    });
    updateButtons();
}

QPushButton* ControlBar::button(const QString& action) const {
    return findChild<QPushButton*>(action);
}

void ControlBar::setTarget(const ControlTarget& target) {
    target_ = target;
    updateButtons();
}

void ControlBar::setRunning(bool running, bool paused) {
    const bool started = running && !running_;
    if (running != running_) setState({}, false);
    running_ = running;
    if (!running) paused_ = false;
    if (paused) paused_ = true;
    updateButtons();
    // a run found running may have been paused by someone else: ask it once which button applies
    if (started && target_.valid()) send(QStringLiteral("status"));
}

void ControlBar::setState(const QString& text, bool error) {
    state_->setText(state_->fontMetrics().elidedText(text, Qt::ElideRight, state_->width()));
    state_->setToolTip(text);
    state_->setStyleSheet(error ? QStringLiteral("color: %1").arg(error_color().name()) : QString());
}

void ControlBar::updateButtons() {
    const bool can = running_ && target_.valid() && !watcher_.isRunning();
    pause_->setEnabled(can && !paused_);
    resume_->setEnabled(can && paused_);
    checkpoint_->setEnabled(can);
    stop_->setEnabled(can);
}

bool ControlBar::send(const QString& action) {
    if (!running_ || !target_.valid() || watcher_.isRunning()) return false;
    if (action == QLatin1String("stop") && confirm_stop_ &&
        QMessageBox::question(this, tr("Stop the run"),
                              tr("Stop the run? It saves a checkpoint and ends with status \"stopped\".")) !=
            QMessageBox::Yes)
        return false;
    if (action != QLatin1String("status")) setState(tr("%1: waiting for the next iteration…").arg(action), false);
    const ControlTarget target = target_;
    // the trainer answers at its next iteration boundary; a status question should not hold the app long
    const auto timeout = action == QLatin1String("status") ? std::chrono::seconds(5) : std::chrono::seconds(30);
    watcher_.setFuture(QtConcurrent::run([target, action, timeout]() -> Reply {
        Reply r{action, {}, {}};
        try {
            if (!target.run_dir.empty()) {
                r.body = ipc::ControlClient::for_run_dir(target.run_dir, target.curve)
                             .request(action.toStdString(), timeout);
            } else {
                ipc::ControlClientOptions o;
                o.endpoint = target.endpoint;
                o.curve = target.curve;
                if (!target.token_file.empty()) o.token = read_token(target.token_file);
                r.body = ipc::ControlClient(o).request(action.toStdString(), timeout);
            }
        } catch (const std::exception& e) {
            r.error = QString::fromStdString(e.what());
        }
        return r;
    }));
    updateButtons();
    return true;
}

}  // namespace mwb::app
