#include "app/monitor/status_line.h"

#include "app/core/format.h"
#include "app/core/theme.h"
#include "mwb/ipc/message.h"

#include <QMap>

#include <algorithm>
#include <cmath>
#include <vector>

namespace mwb::app {

double eta_seconds(const RunTraces& t) {
    if (!t.start || t.end || t.last_step.iteration < 0 || !std::isfinite(t.last_step.iteration_time_s)) return -1;
    const auto it = t.start->config.find("train_iters");
    if (it == t.start->config.end() || !it->is_number_integer()) return -1;
    const int64_t left = it->get<int64_t>() - t.last_step.iteration;
    const Trace& times = t[SeriesId::IterationTime];
    double per_iteration = t.last_step.iteration_time_s;
    if (!times.empty()) {
        const std::size_t n = std::min<std::size_t>(16, times.size());
        std::vector<double> last(times.y.end() - static_cast<std::ptrdiff_t>(n), times.y.end());
        std::nth_element(last.begin(), last.begin() + static_cast<std::ptrdiff_t>(n / 2), last.end());
        per_iteration = last[n / 2];
    }
    return left >= 0 ? static_cast<double>(left) * per_iteration : -1;
}

StatusLine::StatusLine(QWidget* parent) : QLabel(parent) {
    setTextFormat(Qt::RichText);
    setTextInteractionFlags(Qt::TextSelectableByMouse);
    setWordWrap(false);
    // one line that never widens the window: what does not fit is elided, the tooltip has it all
    setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);
    setMinimumWidth(0);
    const QString idle =
        tr("Not watching a run. Start one in Launch, attach to one, or watch a running run from History.");
    display(idle.toHtmlEscaped(), idle);
}

void StatusLine::display(const QString& html, const QString& plain) {
    full_ = plain;
    html_ = html;
    plain_ = plain;
    const int room = std::max(40, width() - 8);
    QFont bold = font();  // the rich text sets the numbers in bold: measure as if all of it were
    bold.setBold(true);
    const QFontMetrics fm(bold);
    const QString shown = fm.horizontalAdvance(plain) <= room
                              ? html
                              : fm.elidedText(plain, Qt::ElideRight, room).toHtmlEscaped();
    if (text() != shown) setText(shown);
    if (toolTip() != plain) setToolTip(plain);
}

void StatusLine::resizeEvent(QResizeEvent* e) {
    QLabel::resizeEvent(e);
    display(html_, plain_);
}

void StatusLine::update(const RunTraces& t, const LinkState& link, bool attached, bool paused) {
    parts_.clear();
    if (!attached && t.run_id.empty()) {
        const QString idle =
            tr("Not watching a run. Start one in Launch, attach to one, or watch a running run from History.");
        display(idle.toHtmlEscaped(), idle);
        return;
    }
    const LastStep& s = t.last_step;
    QString train_iters;
    if (t.start && t.start->config.contains("train_iters") && t.start->config["train_iters"].is_number_integer())
        train_iters = format_int(t.start->config["train_iters"].get<long long>());
    parts_["iteration"] = s.iteration >= 0
                              ? (train_iters.isEmpty() ? format_int(s.iteration)
                                                       : tr("%1 / %2").arg(format_int(s.iteration), train_iters))
                              : tr("—");
    parts_["tokens"] = s.iteration >= 0 ? format_count(static_cast<double>(s.consumed_tokens)) : tr("—");
    parts_["loss"] = format_value(s.loss);
    const double eta = eta_seconds(t);  // from the step records only: frozen while paused
    parts_["eta"] = eta >= 0 ? format_duration(eta) : tr("—");
    if (paused && eta >= 0) parts_["eta"] += tr(" (paused)");

    QString link_text;
    QColor link_color = palette().color(QPalette::WindowText);
    if (!link.error.empty()) {
        link_text = tr("cannot follow: %1").arg(QString::fromStdString(link.error));
        link_color = error_color();
    } else if (!attached) {
        link_text = tr("detached");
    } else if (link.loading_history) {
        link_text = tr("loading history…");
    } else if (link.state == "ended" || t.end) {
        link_text = tr("run over");
    } else if (paused) {
        link_text = tr("paused");
        link_color = warning_color();
    } else if (link.live) {
        link_text = tr("live");
        link_color = ok_color();
    } else if (link.from_files > 0 && link.publish.empty()) {
        link_text = tr("reading the run directory");
    } else if (link.connected) {
        link_text = link.delivered > 0 ? tr("reconnecting…") : tr("waiting for the run…");
        link_color = warning_color();
    } else {
        link_text = tr("connecting…");
    }
    // a run that died without a word (killed, node lost) only goes quiet: say for how long
    if (attached && !paused && !link.live && !t.end && link.state != "ended" && link.last_message > 0) {
        const double quiet = ipc::unix_time() - link.last_message;
        if (quiet > 5) link_text += tr(", last message %1 ago").arg(format_duration(quiet));
    }
    if (attached && !link.store_error.empty())
        link_text += tr(" (not recording: %1)").arg(QString::fromStdString(link.store_error));
    else if (attached && link.recording)
        link_text += tr(", recording");
    parts_["link"] = link_text;

    QString end_html;
    if (t.end) {
        const QString status = QString::fromStdString(t.end->status);
        parts_["end"] =
            status + (t.end->reason.empty() ? QString() : QStringLiteral(": ") + QString::fromStdString(t.end->reason));
        const QColor c = status == QLatin1String("finished") ? ok_color()
                         : (status == QLatin1String("stopped") || status == QLatin1String("interrupted"))
                             ? warning_color()
                             : error_color();
        end_html = tr(" · <b style='color:%1'>ended: %2</b>").arg(c.name(), parts_["end"].toHtmlEscaped());
    }
    // how the run is doing first, its (long) id last: what an elided line drops is the id
    const QString run = QString::fromStdString(t.run_id);
    const QString html =
        tr("iteration <b>%1</b> · tokens <b>%2</b> · loss <b>%3</b> · ETA <b>%4</b> · "
           "<span style='color:%5'>%6</span>%7 · <b>%8</b>")
            .arg(parts_["iteration"], parts_["tokens"], parts_["loss"], parts_["eta"], link_color.name(),
                 link_text.toHtmlEscaped(), end_html, run.toHtmlEscaped());
    const QString plain = tr("iteration %1 · tokens %2 · loss %3 · ETA %4 · %5%6 · %7")
                              .arg(parts_["iteration"], parts_["tokens"], parts_["loss"], parts_["eta"], link_text,
                                   parts_.contains("end") ? tr(" · ended: %1").arg(parts_["end"]) : QString(), run);
    display(html, plain);
}

}  // namespace mwb::app
