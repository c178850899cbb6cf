// Text samples in the app, driven by real input events and checked on what is drawn: the Monitor's
// Samples panel filled from the store (backfill of what a recorder kept) and live from a real ZeroMQ
// publisher, newest iteration first, each prompt drawn on the highlight colour and the completion
// not, selectable and copyable with the keyboard, filtered by prompt; a malformed sample is a
// warning in the event log naming the field. History's Samples tab lists one prompt across the
// selected runs at their newest or a chosen iteration. The reader of mwb-generate --json takes the
// contract's events in any chunking and refuses what breaks it.
#include "ipc/wire_fixtures.h"
#include "test_monitor_fixtures.h"

#include "app/core/sample_text.h"
#include "app/history/history_view.h"
#include "app/history/run_filter_proxy.h"
#include "app/history/run_list_model.h"
#include "app/history/sample_compare.h"
#include "app/launch/generate_stream.h"
#include "app/monitor/event_log_model.h"
#include "app/monitor/monitor_view.h"
#include "app/monitor/samples_panel.h"
#include "mwb/ipc/server.h"
#include "mwb/store/store.h"

#include "support/suite.h"

#include <QClipboard>
#include <QComboBox>
#include <QGuiApplication>
#include <QLabel>
#include <QPushButton>
#include <QScrollBar>
#include <QSpinBox>
#include <QTabBar>
#include <QTabWidget>
#include <QTableView>
#include <QTextBlock>
#include <QTextBrowser>

namespace test_samples {

using namespace mwb;
using namespace mwb::app;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::vector<std::string> kPrompts = {"In the beginning", "Ἐν ἀρχῇ ἦν ὁ λόγος", "And God said"};

std::string completion_of(int64_t iteration, std::size_t prompt) {
    return " words " + std::to_string(prompt) + " at " + std::to_string(iteration);
}

std::string sample_message(const std::string& run, int64_t seq, int64_t iteration, std::size_t prompt,
                           json overrides = json::object()) {
    json f = test::sample_fields(iteration, static_cast<int64_t>(prompt), kPrompts[prompt],
                                 completion_of(iteration, prompt));
    f["consumed_tokens"] = iteration * 256;
    f["completion_tokens"] = 4;
    f["time_s"] = 0.01;
    f.update(overrides);
    return test::wire_message_1_1(run, seq, "sample", f);
}

std::string start_message(const std::string& run) {
    return test::wire_message_1_1(run, 0, "run.start", {{"config", {{"log_interval", 1}}}, {"iteration", 0}});
}

ipc::Message parsed(const std::string& text) {
    return *ipc::parse_message(text);
}

/// The document's text runs drawn on the prompt highlight, and those drawn without it.
void split_by_highlight(const QTextDocument& doc, QStringList& highlighted, QStringList& plain) {
    for (QTextBlock b = doc.begin(); b.isValid(); b = b.next())
        for (auto it = b.begin(); !it.atEnd(); ++it) {
            const QTextFragment f = it.fragment();
            const bool lit = f.charFormat().background().style() != Qt::NoBrush &&
                             f.charFormat().background().color() == prompt_background();
            (lit ? highlighted : plain) << f.text();
        }
}

/// Pixels of `w` drawn in exactly `color`.
int pixels_of(QWidget* w, const QColor& color) {
    const QImage img = w->grab().toImage().convertToFormat(QImage::Format_RGB32);
    int n = 0;
    for (int y = 0; y < img.height(); ++y)
        for (int x = 0; x < img.width(); ++x) n += QColor(img.pixel(x, y)).rgb() == color.rgb();
    return n;
}

void click_tab(QTabWidget* tabs, int index) {
    QTabBar* bar = tabs->tabBar();
    QTest::mouseClick(bar, Qt::LeftButton, {}, bar->tabRect(index).center());
}

}  // namespace

class TestSamples : public QObject {
    Q_OBJECT
private slots:
    void a_long_list_opens_at_the_newest_sample() {
        // Filled while hidden (the Events tab is in front), the view must open at its top, the newest
        // iteration: QTextEdit scrolls to its own cursor when first shown, and that cursor had moved
        // along with the inserts to the oldest sample (found in the UI check's picture of a real run).
        std::vector<store::SampleRecord> samples;
        for (int64_t it = 10, seq = 0; it <= 200; it += 10)
            for (int64_t p = 0; p < 3; ++p) {
                store::SampleRecord r;
                r.seq = seq++;
                r.iteration = it;
                r.prompt_index = p;
                r.prompt = "prompt " + std::to_string(p);
                r.completion =
                    " a completion long enough to wrap in a narrow panel, at iteration " + std::to_string(it);
                r.finish_reason = "length";
                samples.push_back(r);
            }
        SamplesPanel panel;
        panel.resize(360, 240);
        panel.sync(samples, true);
        panel.show();
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        QTest::qWait(50);
        QScrollBar* bar = panel.text()->verticalScrollBar();
        QVERIFY2(bar->maximum() > 0, "the list must overflow the view for this check to mean anything");
        QCOMPARE(bar->value(), 0);
        QVERIFY(panel.text()->toPlainText().startsWith("Iteration 200"));
    }

    void the_monitor_shows_samples_from_the_store_then_live_newest_first() {
        test::TempDir t;
        const fs::path db = t / "h.sqlite";
        const std::string run = "20261201-140000-gpt-5a3b1e00";
        // what a recorder stored earlier: the start and the samples at iterations 10 and 20 (seq 0..6)
        int64_t seq = 0;
        {
            store::Store st(db);
            st.ingest(parsed(start_message(run)));
            ++seq;
            for (int64_t it : {10, 20})
                for (std::size_t p = 0; p < kPrompts.size(); ++p) st.ingest(parsed(sample_message(run, seq++, it, p)));
        }
        // the live run continues from seq 7: iteration 30
        ipc::ServerOptions o;
        o.run_id = run;
        o.control_endpoint = "";
        o.heartbeat_interval = 200ms;
        ipc::TelemetryServer server(o);
        for (std::size_t p = 0; p < kPrompts.size(); ++p) {
            server.publish("sample", sample_message(run, seq, 30, p));
            ++seq;
        }
        QVERIFY(server.flush(5s));

        MonitorView view;
        view.resize(1400, 900);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        AttachOptions a;
        a.endpoint = server.publish_endpoint();
        a.store_file = db;
        view.attach(a);
        SamplesPanel* panel = view.samples();
        QVERIFY2(test::wait_gui([&] { return view.liveRun()->traces().samples.size() == 9; }),
                 qPrintable(QString::number(view.liveRun()->traces().samples.size())));
        view.redraw();
        QTest::qWait(50);
        QCOMPARE(view.logTabs()->tabText(1), QString("Samples (9)"));
        click_tab(view.logTabs(), 1);  // the user opens the Samples tab
        QVERIFY(test::wait_gui([&] { return view.logTabs()->currentWidget() == panel; }));
        QCOMPARE(panel->summary()->text(), QString("9 samples at 3 iterations"));

        // newest iteration first, prompts in file order within one
        const QString text = panel->text()->toPlainText();
        const int i30 = text.indexOf("Iteration 30"), i20 = text.indexOf("Iteration 20"),
                  i10 = text.indexOf("Iteration 10");
        QVERIFY2(i30 >= 0 && i30 < i20 && i20 < i10, qPrintable(text));
        const QString first_sample = QString::fromStdString(kPrompts[0] + completion_of(30, 0));
        const QString last_prompt = QString::fromStdString(kPrompts[2] + completion_of(30, 2));
        QVERIFY(text.indexOf(first_sample) > i30 && text.indexOf(first_sample) < text.indexOf(last_prompt));
        QVERIFY(text.indexOf(last_prompt) < i20);

        // each prompt on the highlight, each completion without it
        QStringList lit, plain;
        split_by_highlight(*panel->text()->document(), lit, plain);
        QCOMPARE(lit.size(), 9);
        for (const QString& l : lit)
            QVERIFY2(l == QString::fromStdString(kPrompts[0]) || l == QString::fromStdString(kPrompts[1]) ||
                         l == QString::fromStdString(kPrompts[2]),
                     qPrintable(l));
        for (int64_t it : {10, 20, 30})
            for (std::size_t p = 0; p < kPrompts.size(); ++p)
                QVERIFY(plain.contains(QString::fromStdString(completion_of(it, p))));
        // and the highlight is drawn: rows of the amber behind nine prompts
        const int amber = pixels_of(panel->text()->viewport(), prompt_background());
        QVERIFY2(amber > 9 * 200, qPrintable(QString::number(amber)));
        test::maybe_save_shot(view, "samples-panel");

        // selectable and copyable with the keyboard
        QTest::mouseClick(panel->text()->viewport(), Qt::LeftButton, {}, QPoint(20, 20));
        QTest::keyClick(panel->text(), Qt::Key_A, Qt::ControlModifier);
        QTest::keyClick(panel->text(), Qt::Key_C, Qt::ControlModifier);
        const QString copied = QGuiApplication::clipboard()->text();
        QVERIFY2(copied.contains(first_sample) && copied.contains("Iteration 10"), qPrintable(copied));

        // one prompt across iterations: the filter, chosen with the keyboard
        panel->promptFilter()->setFocus();
        QTest::keyClick(panel->promptFilter(), Qt::Key_Down);
        QCOMPARE(panel->promptFilter()->currentText(), QString::fromStdString(kPrompts[0]));
        QTest::keyClick(panel->promptFilter(), Qt::Key_Down);
        QCOMPARE(panel->promptFilter()->currentText(), QString::fromStdString(kPrompts[1]));
        const QString one = panel->text()->toPlainText();
        QVERIFY(!one.contains(QString::fromStdString(kPrompts[0])) &&
                one.contains(QString::fromStdString(kPrompts[1] + completion_of(10, 1))));
        QCOMPARE(one.count("Iteration"), 3);

        // a malformed sample: not shown as one, a warning in the event log naming the field
        server.publish("sample", sample_message(run, seq++, 40, 0, {{"prompt_index", 99}}));
        server.publish("sample", sample_message(run, seq++, 40, 1));
        QVERIFY(test::wait_gui([&] { return view.liveRun()->traces().samples.size() == 10; }));
        view.redraw();
        QTest::qWait(50);
        bool warned = false;
        for (int r = 0; r < view.eventLog()->rowCount(); ++r)
            warned =
                warned || view.eventLog()->index(r, EventLogModel::Detail).data().toString().contains("'prompt_index'");
        QVERIFY(warned);
        // the filter kept its prompt while the new sample arrived
        QCOMPARE(panel->promptFilter()->currentText(), QString::fromStdString(kPrompts[1]));
        QVERIFY(panel->text()->toPlainText().startsWith("Iteration 40"));
        view.detach();
        store::Store st(db);
        QCOMPARE(st.counts(run)["samples"], 10);  // the Monitor recorded what it showed
    }

    void history_compares_one_prompt_across_runs() {
        test::TempDir t;
        const fs::path db = t / "h.sqlite";
        const std::string a = "20261201-150000-small-0000000a", b = "20261201-150100-large-0000000b";
        {
            store::Store st(db);
            for (const auto& run : {a, b}) {
                int64_t seq = 0;
                st.ingest(parsed(start_message(run)));
                ++seq;
                for (int64_t it : {100, 200, 300})
                    for (std::size_t p = 0; p < 2; ++p)
                        st.ingest(parsed(sample_message(run, seq++, run == a ? it : it + 50, p,
                                                        {{"completion", run.substr(16, 5) + completion_of(it, p)}})));
            }
        }
        HistoryView view;
        view.resize(1400, 900);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        view.setStoreFile(db);
        QCOMPARE(view.model()->rowCount(), 2);
        // select both runs with the mouse (click, then Ctrl+click)
        QTableView* table = view.table();
        QTest::mouseClick(table->viewport(), Qt::LeftButton, {},
                          table->visualRect(view.proxy()->index(0, RunListModel::Name)).center());
        QTest::mouseClick(table->viewport(), Qt::LeftButton, Qt::ControlModifier,
                          table->visualRect(view.proxy()->index(1, RunListModel::Name)).center());
        QCOMPARE(view.selectedRuns().size(), std::size_t{2});
        SampleCompare* cmp = view.sampleCompare();
        auto* tabs = qobject_cast<QTabWidget*>(cmp->parentWidget()->parentWidget());
        QVERIFY(tabs);
        click_tab(tabs, tabs->indexOf(cmp));
        QVERIFY(test::wait_gui([&] { return cmp->isVisible(); }));
        QCOMPARE(cmp->promptChoice()->count(), 2);
        QCOMPARE(cmp->promptChoice()->currentText(), QString::fromStdString(kPrompts[0]));

        // newest of each run: a at 300, b at 350
        QString text = cmp->text()->toPlainText();
        QVERIFY2(text.contains("small" + QString::fromStdString(completion_of(300, 0))) &&
                     text.contains("large" + QString::fromStdString(completion_of(300, 0))) &&
                     text.contains("iteration 350"),
                 qPrintable(text));
        QVERIFY(!text.contains(QString::fromStdString(kPrompts[1])));
        QStringList lit, plain;
        split_by_highlight(*cmp->text()->document(), lit, plain);
        QCOMPARE(lit, QStringList(2, QString::fromStdString(kPrompts[0])));

        // the other prompt, with the keyboard
        cmp->promptChoice()->setFocus();
        QTest::keyClick(cmp->promptChoice(), Qt::Key_Down);
        QVERIFY(cmp->text()->toPlainText().contains("small" + QString::fromStdString(completion_of(300, 1))));
        QTest::keyClick(cmp->promptChoice(), Qt::Key_Up);

        // at or before iteration 220: a's sample at 200, b's at 150 (its 100 + 50)
        cmp->atChoice()->setFocus();
        QTest::keyClick(cmp->atChoice(), Qt::Key_Down);
        QVERIFY(cmp->iteration()->isEnabled());
        cmp->iteration()->setFocus();
        cmp->iteration()->selectAll();
        QTest::keyClicks(cmp->iteration(), "220");
        text = cmp->text()->toPlainText();
        QVERIFY2(text.contains("small" + QString::fromStdString(completion_of(200, 0))) &&
                     text.contains("large" + QString::fromStdString(completion_of(100, 0))) &&
                     text.contains("iteration 150") && !text.contains("iteration 300"),
                 qPrintable(text));
        // before any sample: said so per run
        cmp->iteration()->selectAll();
        QTest::keyClicks(cmp->iteration(), "99");
        QCOMPARE(cmp->text()->toPlainText().count("no sample of this prompt at or before iteration 99"), 2);

        // every iteration: three per run, newest first
        cmp->atChoice()->setFocus();
        QTest::keyClick(cmp->atChoice(), Qt::Key_Down);
        text = cmp->text()->toPlainText();
        QCOMPARE(text.count("iteration "), 6);
        QVERIFY(text.indexOf("iteration 300") < text.indexOf("iteration 200"));
        // a finished run without a checkpoint cannot generate: the button says why
        QVERIFY(!view.generateButton()->isEnabled());
    }

    void the_generate_reader_takes_the_contract_in_any_chunking() {
        const std::string out =
            "{\"type\":\"start\",\"prompts\":1,\"model\":{\"num_layers\":2}}\n"
            "{\"type\":\"token\",\"prompt_index\":0,\"token\":17,\"text\":\" Ἐν\"}\n"
            "{\"type\":\"token\",\"prompt_index\":0,\"token\":200,\"text\":\"\"}\n"
            "{\"type\":\"token\",\"prompt_index\":0,\"token\":201,\"text\":\"ἀ\"}\n"
            "{\"type\":\"future\",\"x\":1}\n"
            "{\"type\":\"done\",\"prompt_index\":0,\"completion\":\" Ἐνἀ\",\"completion_tokens\":3,"
            "\"finish_reason\":\"length\",\"tokens_per_sec\":812.5}\n";
        for (std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{7}, out.size()}) {
            GenerateStream s;
            std::vector<GenerateEvent> events;
            for (std::size_t i = 0; i < out.size(); i += chunk) {
                auto e = s.feed(std::string_view(out).substr(i, chunk));
                events.insert(events.end(), e.begin(), e.end());
            }
            QCOMPARE(events.size(), std::size_t{5});  // the unknown type is ignored
            QCOMPARE(events[0].type, GenerateEvent::Type::Start);
            QCOMPARE(events[1].text, std::string(" Ἐν"));
            QCOMPARE(events[2].text, std::string());
            QCOMPARE(events[3].token, 201);
            QCOMPARE(events[4].type, GenerateEvent::Type::Done);
            QCOMPARE(events[4].text, std::string(" Ἐνἀ"));
            QCOMPARE(events[4].finish_reason, std::string("length"));
            QCOMPARE(events[4].tokens_per_sec, 812.5);
        }
        GenerateStream s;
        auto e = s.feed(
            "{\"type\":\"error\",\"message\":\"--load /x: no checkpoint\"}\nnot json\n"
            "{\"type\":\"token\",\"prompt_index\":\"0\",\"text\":\"a\"}\n");
        QCOMPARE(e.size(), std::size_t{3});
        QCOMPARE(e[0].text, std::string("--load /x: no checkpoint"));
        QVERIFY(e[1].type == GenerateEvent::Type::Error && e[1].text.find("not a JSON event") != std::string::npos);
        QVERIFY(e[2].type == GenerateEvent::Type::Error && e[2].text.find("prompt_index") != std::string::npos);
        // an endless line is refused once, and the next line reads again
        e = s.feed(std::string(GenerateStream::kMaxLineBytes + 10, 'x'));
        QCOMPARE(e.size(), std::size_t{1});
        QVERIFY(e[0].text.find("over 4 MiB") != std::string::npos);
        e = s.feed(std::string(100, 'x') + "\n{\"type\":\"start\",\"prompts\":2}");
        QVERIFY(e.empty());
        e = s.finish();  // the last line without its newline
        QCOMPARE(e.size(), std::size_t{1});
        QCOMPARE(e[0].prompts, 2);
        // A batch: each prompt's done line comes as that prompt finishes, between the other's tokens.
        GenerateStream batch;
        e = batch.feed(
            "{\"type\":\"start\",\"prompts\":2}\n"
            "{\"type\":\"token\",\"prompt_index\":1,\"token\":5,\"text\":\"b\"}\n"
            "{\"type\":\"done\",\"prompt_index\":1,\"completion\":\"b\",\"completion_tokens\":1,"
            "\"finish_reason\":\"eos\",\"tokens_per_sec\":9}\n"
            "{\"type\":\"token\",\"prompt_index\":0,\"token\":6,\"text\":\"a\"}\n"
            "{\"type\":\"done\",\"prompt_index\":0,\"completion\":\"a\",\"completion_tokens\":1,"
            "\"finish_reason\":\"length\",\"tokens_per_sec\":8}\n");
        QCOMPARE(e.size(), std::size_t{5});
        QVERIFY(e[2].type == GenerateEvent::Type::Done && e[2].prompt_index == 1 && e[2].finish_reason == "eos");
        QVERIFY(e[3].type == GenerateEvent::Type::Token && e[3].prompt_index == 0 && e[3].text == "a");
        QVERIFY(e[4].type == GenerateEvent::Type::Done && e[4].prompt_index == 0 && e[4].text == "a");
    }
};

MWB_TEST_SUITE_WIDGETS(test_samples, TestSamples)
}  // namespace test_samples
#include "test_samples.moc"
