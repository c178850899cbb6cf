#pragma once
// One line over the Monitor: iteration (of train_iters), tokens, the newest loss, ETA from the newest
// iteration time, and the link (live, catching up, reconnecting, reading files, recording) — or, once
// the run is over, how it ended.
#include "app/live/run_traces.h"
#include "app/live/series_buffer.h"

#include <QLabel>

namespace mwb::app {

class StatusLine : public QLabel {
    Q_OBJECT
public:
    explicit StatusLine(QWidget* parent = nullptr);
    /// `paused`: the trainer said it is paused (the control bar knows): shown, and the ETA frozen.
    void update(const RunTraces& traces, const LinkState& link, bool attached, bool paused = false);
    /// Plain text of the parts (tests): "iteration", "tokens", "eta", "link", "end".
    QString part(const QString& name) const { return parts_.value(name); }

    /// The full text (the line itself elides what does not fit; the tooltip holds all of it).
    QString fullText() const { return full_; }

protected:
    void resizeEvent(QResizeEvent* e) override;

private:
    void display(const QString& html, const QString& plain);
    QMap<QString, QString> parts_;
    QString full_, html_, plain_;
};

/// Seconds left: (train_iters − iteration) × the median of the last 16 iteration times (a pause or a
/// checkpoint inflates one record's time, not the estimate); negative when unknown.
double eta_seconds(const RunTraces& traces);

}  // namespace mwb::app
