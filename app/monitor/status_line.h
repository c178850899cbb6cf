#pragma once
// One line over the Monitor: iteration (of train_iters), tokens, the newest loss, ETA from the newest
// iteration time, and the link (live, catching up, reconnecting, reading files, recording) — or, once
// the run is over, how it ended.
#include "live/run_traces.h"
#include "live/series_buffer.h"

#include <QLabel>

namespace mwb::app {

class StatusLine : public QLabel {
    Q_OBJECT
public:
    explicit StatusLine(QWidget* parent = nullptr);
    void update(const RunTraces& traces, const LinkState& link, bool attached);
    /// Plain text of the parts (tests): "iteration", "tokens", "eta", "link", "end".
    QString part(const QString& name) const { return parts_.value(name); }

private:
    QMap<QString, QString> parts_;
};

/// Seconds left: (train_iters − iteration) × the newest iteration time; negative when unknown.
double eta_seconds(const RunTraces& traces);

}  // namespace mwb::app
