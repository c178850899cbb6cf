#include "app/launch/attach_panel.h"

#include "app/core/paths.h"
#include "app/core/theme.h"
#include "mwb/ipc/curve.h"
#include "mwb/ipc/endpoint.h"

#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QToolButton>
#include <QVBoxLayout>

namespace mwb::app {

namespace {

bool is_network_endpoint(const QString& text) {
    return text.contains(QStringLiteral("://"));
}

/// A line edit with a "…" button that picks a file (or a directory).
QWidget* with_browse(QLineEdit* edit, const QString& title, bool directory) {
    auto* box = new QWidget;
    auto* row = new QHBoxLayout(box);
    row->setContentsMargins(0, 0, 0, 0);
    row->addWidget(edit, 1);
    auto* browse = new QToolButton;
    browse->setText(QStringLiteral("…"));
    browse->setToolTip(title);
    QObject::connect(browse, &QToolButton::clicked, edit, [edit, title, directory] {
        const QString path = directory ? QFileDialog::getExistingDirectory(edit, title, edit->text())
                                       : QFileDialog::getOpenFileName(edit, title, edit->text());
        if (!path.isEmpty()) edit->setText(path);
    });
    row->addWidget(browse);
    return box;
}

}  // namespace

bool attach_options(const AttachInputs& in, const std::filesystem::path& store_file, AttachOptions& out,
                    QString* error) {
    const auto fail = [error](const QString& text) {
        if (error) *error = text;
        return false;
    };
    out = AttachOptions{};
    out.store_file = store_file;
    const QString endpoint = in.endpoint.trimmed();
    if (endpoint.isEmpty()) return fail(QObject::tr("endpoint: give tcp://HOST:PORT, ipc://PATH or a run directory"));
    out.endpoint = endpoint.toStdString();
    if (!is_network_endpoint(endpoint)) return true;  // a run directory: telemetry.json says the rest
    ipc::Endpoint parsed;
    try {
        parsed = ipc::parse_endpoint(out.endpoint, "endpoint");
    } catch (const std::exception& e) {
        return fail(QString::fromUtf8(e.what()));
    }
    if (!in.token_file.trimmed().isEmpty()) out.token_file = to_path(in.token_file.trimmed());
    const bool keys_given = !in.client_key.trimmed().isEmpty() || !in.server_key.trimmed().isEmpty();
    if (ipc::is_loopback(parsed) && !keys_given) return true;
    if (in.client_key.trimmed().isEmpty())
        return fail(QObject::tr("client key: %1 is not on loopback, so the run requires CURVE; give your key pair "
                                "(NAME.key_secret, made by mwb-record keygen NAME)")
                        .arg(endpoint));
    if (in.server_key.trimmed().isEmpty())
        return fail(QObject::tr("server key: give the run's public key (run.key, or its 40-character Z85 text)"));
    try {
        ipc::ClientCurve curve;
        curve.client = ipc::load_secret_key_file(to_path(in.client_key.trimmed()));
        curve.server_public_key = ipc::load_public_key(to_path(in.server_key.trimmed()));
        out.curve = curve;
    } catch (const std::exception& e) {
        return fail(QString::fromUtf8(e.what()));
    }
    return true;
}

AttachPanel::AttachPanel(QWidget* parent) : QGroupBox(tr("Attach to a running job"), parent) {
    auto* v = new QVBoxLayout(this);
    auto* form = new QFormLayout;
    form->setLabelAlignment(Qt::AlignRight | Qt::AlignVCenter);
    endpoint_ = new QLineEdit;
    endpoint_->setObjectName(QStringLiteral("attach_endpoint"));
    endpoint_->setPlaceholderText(tr("tcp://node7:5555, or a run directory on this machine"));
    endpoint_->setToolTip(
        tr("The run's telemetry endpoint (its PUB socket: the job prints it, telemetry.json holds it) "
           "or its run directory"));
    form->addRow(tr("Endpoint"), with_browse(endpoint_, tr("Run directory"), true));
    key_rows_ = new QWidget;
    auto* keys = new QFormLayout(key_rows_);
    keys->setContentsMargins(0, 0, 0, 0);
    keys->setLabelAlignment(Qt::AlignRight | Qt::AlignVCenter);
    client_key_ = new QLineEdit;
    client_key_->setObjectName(QStringLiteral("attach_client_key"));
    client_key_->setPlaceholderText(tr("keys/you.key_secret"));
    server_key_ = new QLineEdit;
    server_key_->setObjectName(QStringLiteral("attach_server_key"));
    server_key_->setPlaceholderText(tr("keys/run.key"));
    keys->addRow(tr("Your key pair"), with_browse(client_key_, tr("Your CURVE key pair (NAME.key_secret)"), false));
    keys->addRow(tr("Run's public key"), with_browse(server_key_, tr("The run's public key (run.key)"), false));
    form->addRow(key_rows_);
    token_ = new QLineEdit;
    token_->setObjectName(QStringLiteral("attach_token"));
    token_->setPlaceholderText(tr("optional: control.token of a loopback run, for pause/stop"));
    form->addRow(tr("Control token"), with_browse(token_, tr("Control token file"), false));
    v->addLayout(form);
    auto* row = new QHBoxLayout;
    problem_ = new QLabel;
    problem_->setObjectName(QStringLiteral("attach_problem"));
    problem_->setWordWrap(true);
    auto* attach = new QPushButton(tr("Attach"));
    attach->setObjectName(QStringLiteral("attach_button"));
    attach->setToolTip(tr("Follow this run in the Monitor, recording it into the history"));
    row->addWidget(problem_, 1);
    row->addWidget(attach);
    v->addLayout(row);
    connect(attach, &QPushButton::clicked, this, &AttachPanel::requestAttach);
    connect(endpoint_, &QLineEdit::returnPressed, this, &AttachPanel::requestAttach);
    connect(endpoint_, &QLineEdit::textChanged, this, &AttachPanel::updateKeyRows);
    updateKeyRows();
}

AttachInputs AttachPanel::inputs() const {
    return {endpoint_->text(), client_key_->text(), server_key_->text(), token_->text()};
}

void AttachPanel::setInputs(const AttachInputs& in) {
    endpoint_->setText(in.endpoint);
    client_key_->setText(in.client_key);
    server_key_->setText(in.server_key);
    token_->setText(in.token_file);
}

QString AttachPanel::problem() const {
    return problem_->text();
}

bool AttachPanel::requestAttach() {
    AttachOptions options;
    QString error;
    if (!attach_options(inputs(), default_store_file(), options, &error)) {
        problem_->setText(error);
        QPalette p = problem_->palette();
        p.setColor(QPalette::WindowText, error_color());
        problem_->setPalette(p);
        return false;
    }
    problem_->setText(tr("Following %1").arg(endpoint_->text().trimmed()));
    problem_->setPalette(palette());
    emit attachRequested(options);
    return true;
}

void AttachPanel::updateKeyRows() {
    // keys matter only off loopback; keep them visible whenever the endpoint is not plainly local
    const QString t = endpoint_->text().trimmed();
    bool local = !is_network_endpoint(t);
    if (!local) {
        try {
            local = ipc::is_loopback(ipc::parse_endpoint(t.toStdString()));
        } catch (const std::exception&) {
            local = false;
        }
    }
    key_rows_->setEnabled(!local || !client_key_->text().isEmpty());
}

}  // namespace mwb::app
