// mwb-samples-bench: what the Samples panel costs the GUI thread (docs/performance.md, "App"): a run
// that sampled 64 prompts at N points (completions of ~200 bytes); the rebuild when a run is attached
// (all of it) and when one more sampling point arrives, median of 7, offscreen.
//   mwb-samples-bench [POINTS]    (default 500)
#include "app/monitor/samples_panel.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QLabel>

#include <algorithm>
#include <cstdio>

using namespace mwb;

int main(int argc, char** argv) {
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    const int points = argc > 1 ? std::max(1, std::atoi(argv[1])) : 500;
    std::vector<store::SampleRecord> all;
    for (int p = 1; p <= points; ++p)
        for (int k = 0; k < 64; ++k) {
            store::SampleRecord s;
            s.seq = static_cast<int64_t>(all.size());
            s.iteration = p * 100;
            s.prompt_index = k;
            s.prompt = "Prompt number " + std::to_string(k);
            s.completion = std::string(200, 'x');
            s.finish_reason = "length";
            s.completion_tokens = 32;
            all.push_back(std::move(s));
        }
    app::SamplesPanel panel;
    panel.resize(500, 800);
    panel.show();
    QApplication::processEvents();
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    std::vector<double> attach, more;
    const std::vector<store::SampleRecord> before(all.begin(), all.end() - 64);
    for (int r = 0; r < 7; ++r) {
        QElapsedTimer t;
        t.start();
        panel.sync(before, true);
        attach.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
        t.restart();
        panel.sync(all, false);  // the next sampling point
        more.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
    }
    std::printf("samples panel, %d points x 64 prompts (%zu samples; %s):\n", points, all.size(),
                panel.summary()->text().toUtf8().constData());
    std::printf("  attach (rebuild all)      %8.1f ms\n", median(attach));
    std::printf("  one more sampling point   %8.1f ms\n", median(more));
    return 0;
}
