#pragma once
// "Attach": follow any running job by its telemetry endpoint (tcp://HOST:PORT, ipc://PATH) or its
// run directory on this machine. Off loopback the run requires CURVE (docs/protocol.md, "Security"):
// the panel then asks for this side's key pair (NAME.key_secret) and the run's public key.
#include "app/live/telemetry_worker.h"

#include <QGroupBox>

class QLineEdit;
class QLabel;

namespace mwb::app {

/// What the user typed into the panel.
struct AttachInputs {
    QString endpoint;    ///< tcp://HOST:PORT, ipc://PATH or a run directory
    QString client_key;  ///< NAME.key_secret (this side's key pair); off loopback only
    QString server_key;  ///< the run's public key: run.key, or the 40-character Z85 text
    QString token_file;  ///< control token for a loopback endpoint (a run directory has its own)
};

/// Checks the inputs and loads the keys; false with `error` naming the field when they cannot work
/// (an empty or malformed endpoint, a non-loopback endpoint without keys, an unreadable key file).
bool attach_options(const AttachInputs& in, const std::filesystem::path& store_file, AttachOptions& out,
                    QString* error);

class AttachPanel : public QGroupBox {
    Q_OBJECT
public:
    explicit AttachPanel(QWidget* parent = nullptr);
    AttachInputs inputs() const;
    void setInputs(const AttachInputs& in);
    /// Checks the inputs and emits attachRequested (or shows the problem under the panel).
    bool requestAttach();
    QString problem() const;

signals:
    void attachRequested(const mwb::app::AttachOptions& options);

private:
    void updateKeyRows();
    QLineEdit* endpoint_ = nullptr;
    QLineEdit* client_key_ = nullptr;
    QLineEdit* server_key_ = nullptr;
    QLineEdit* token_ = nullptr;
    QWidget* key_rows_ = nullptr;
    QLabel* problem_ = nullptr;
};

}  // namespace mwb::app
