// "Generate…" against the real mwb-generate (SAMPLES_CONTRACT.md) on a checkpoint a short real
// mwb-train run saves: opened from History's button on that finished run, driven by real input (the
// prompt typed, greedy ticked, Generate and Stop clicked); the output streams in pieces, shows the
// prompt highlighted and then exactly the completion `mwb-generate --json` gives on its own with the
// same settings (greedy: deterministic); a bad checkpoint shows the process's own error on one line.
// Without an mwb-generate target in this build the suite is a ctest skip (exit 77), never a pass.
#include "test_monitor_fixtures.h"

#include "app/core/paths.h"
#include "app/core/sample_text.h"
#include "app/history/history_view.h"
#include "app/history/run_filter_proxy.h"
#include "app/history/run_list_model.h"
#include "app/launch/generate_dialog.h"
#include "app/launch/generate_stream.h"
#include "mwb/store/store.h"

#include "support/suite.h"

#include <QCheckBox>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableView>
#include <QTextBlock>
#include <QTextBrowser>

#include <cstdio>

namespace test_generate {

using namespace mwb;
using namespace mwb::app;
namespace fs = std::filesystem;

namespace {

#ifdef MWB_GENERATE_EXE
const char* const kGenerate = MWB_GENERATE_EXE;
#else
const char* const kGenerate = "";
#endif

const QString kPrompt = QStringLiteral("In the beginning");

/// What mwb-generate --json says on its own: the events of one run.
std::vector<GenerateEvent> run_generate(const QStringList& args, int* exit_code) {
    QProcess p;
    p.start(QString::fromUtf8(kGenerate), args);
    p.waitForFinished(60000);
    *exit_code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    GenerateStream s;
    const QByteArray out = p.readAllStandardOutput();
    auto events = s.feed(std::string_view(out.constData(), static_cast<std::size_t>(out.size())));
    for (auto& e : s.finish()) events.push_back(e);
    return events;
}

}  // namespace

class TestGenerate : public QObject {
    Q_OBJECT
    test::TempDir tmp_;
    fs::path ckpt_, run_dir_, db_;

private slots:
    void initTestCase() {
        qputenv("MWB_GENERATE", kGenerate);  // the app's own lookup finds the binary under test
        ckpt_ = tmp_ / "ckpt";
        run_dir_ = tmp_ / "run";
        db_ = tmp_ / "h.sqlite";
        QStringList args = test::tiny_run_args(run_dir_, 4, {"--save", test::qpath(ckpt_), "--save-interval", "4"});
        const int tok = static_cast<int>(args.indexOf("NullTokenizer"));
        args[tok] = QStringLiteral("ByteTokenizer");  // text in, text out
        args.removeAt(static_cast<int>(args.indexOf("--vocab-size")) + 1);
        args.removeAll("--vocab-size");
        test::Child trainer;
        trainer.start(test::trainer_exe(), args);
        QCOMPARE(trainer.wait(60000), 0);
        QVERIFY(fs::exists(ckpt_ / "latest_checkpointed_iteration.txt"));
        store::Store st(db_);
        store::Store::Transaction tx(st);
        for (const auto& m : test::run_dir_messages(run_dir_)) st.ingest(m);
        tx.commit();
    }

    void history_opens_generate_and_the_text_streams_in() {
        HistoryView history;
        history.resize(1300, 800);
        history.show();
        QVERIFY(QTest::qWaitForWindowExposed(&history));
        history.setStoreFile(db_);
        QCOMPARE(history.model()->rowCount(), 1);
        QTableView* table = history.table();
        QTest::mouseClick(table->viewport(), Qt::LeftButton, {},
                          table->visualRect(history.proxy()->index(0, RunListModel::Name)).center());
        QVERIFY(history.generateButton()->isEnabled());
        QTest::mouseClick(history.generateButton(), Qt::LeftButton);
        auto* dialog = history.findChild<GenerateDialog*>();
        QVERIFY(dialog);
        QVERIFY(QTest::qWaitForWindowExposed(dialog));
        QCOMPARE(dialog->checkpointEdit()->text(), test::qpath(ckpt_));
        QCOMPARE(dialog->program(), QFileInfo(QString::fromUtf8(kGenerate)).canonicalFilePath());

        // the user's settings, typed and clicked
        dialog->promptEdit()->setFocus();
        QTest::keyClicks(dialog->promptEdit(), kPrompt);
        dialog->maxNewTokens()->setFocus();
        dialog->maxNewTokens()->selectAll();
        QTest::keyClicks(dialog->maxNewTokens(), "24");
        QTest::mouseClick(dialog->greedy(), Qt::LeftButton, {}, QPoint(8, dialog->greedy()->height() / 2));
        QVERIFY(dialog->greedy()->isChecked());
        QVERIFY(!dialog->temperature()->isEnabled());
        const GenerateSettings s = dialog->settings();
        QCOMPARE(s.prompt, kPrompt);
        QCOMPARE(s.max_new_tokens, 24);

        QSignalSpy ended(dialog, &GenerateDialog::generationEnded);
        QSignalSpy drawn(dialog->output()->document(), &QTextDocument::contentsChanged);
        QTest::mouseClick(dialog->generateButton(), Qt::LeftButton);
        QVERIFY(dialog->stopButton()->isEnabled());
        QVERIFY(test::wait_gui([&] { return !ended.isEmpty(); }, std::chrono::seconds(60)));
        QVERIFY2(ended.front().at(0).toBool(), qPrintable(ended.front().at(1).toString()));

        // the same settings on the command line: the reference
        int code = -1;
        const auto events = run_generate(s.arguments(), &code);
        QCOMPARE(code, 0);
        QVERIFY(!events.empty() && events.back().type == GenerateEvent::Type::Done);
        const QString expected = QString::fromStdString(events.back().text);
        int pieces = 0;
        for (const auto& e : events) pieces += e.type == GenerateEvent::Type::Token && !e.text.empty();
        QCOMPARE(dialog->completion(), expected);
        QCOMPARE(dialog->output()->toPlainText(), kPrompt + expected);
        QVERIFY2(drawn.size() >= pieces, qPrintable(QString("%1 redraws for %2 pieces").arg(drawn.size()).arg(pieces)));
        // the prompt on the highlight, the completion without
        QString lit, plain;
        for (QTextBlock b = dialog->output()->document()->begin(); b.isValid(); b = b.next())
            for (auto it = b.begin(); !it.atEnd(); ++it)
                (it.fragment().charFormat().background().color() == prompt_background() &&
                         it.fragment().charFormat().background().style() != Qt::NoBrush
                     ? lit
                     : plain) += it.fragment().text();
        QCOMPARE(lit, kPrompt);
        QCOMPARE(plain, QString(expected).remove('\n'));  // a newline is a block break, not a fragment's text
        QVERIFY2(dialog->status()->text().startsWith("Done:"), qPrintable(dialog->status()->text()));
        QVERIFY(dialog->generateButton()->isEnabled() && !dialog->stopButton()->isEnabled());
        test::maybe_save_shot(*dialog, "generate_dialog");
        dialog->close();
    }

    void a_bad_checkpoint_shows_the_process_error_on_one_line() {
        GenerateDialog dialog(test::qpath(tmp_ / "no-such-checkpoint"));
        dialog.show();
        QVERIFY(QTest::qWaitForWindowExposed(&dialog));
        const int height = dialog.status()->height();
        dialog.promptEdit()->setFocus();
        QTest::keyClicks(dialog.promptEdit(), kPrompt);
        QSignalSpy ended(&dialog, &GenerateDialog::generationEnded);
        QTest::mouseClick(dialog.generateButton(), Qt::LeftButton);
        QVERIFY(test::wait_gui([&] { return !ended.isEmpty(); }, std::chrono::seconds(60)));
        QVERIFY(!ended.front().at(0).toBool());
        int code = -1;
        const auto events = run_generate(dialog.settings().arguments(), &code);
        QVERIFY(code != 0);
        QVERIFY(!events.empty() && events.back().type == GenerateEvent::Type::Error);
        const QString message = QString::fromStdString(events.back().text).simplified();
        QCOMPARE(ended.front().at(1).toString().simplified(), message);
        QCOMPARE(dialog.status()->toolTip(), message);
        QVERIFY(!dialog.status()->text().contains('\n'));
        QCOMPARE(dialog.status()->height(), height);
    }

    void stop_ends_the_process() {
        GenerateDialog dialog(test::qpath(ckpt_));
        dialog.show();
        QVERIFY(QTest::qWaitForWindowExposed(&dialog));
        dialog.promptEdit()->setFocus();
        QTest::keyClicks(dialog.promptEdit(), kPrompt);
        QSignalSpy ended(&dialog, &GenerateDialog::generationEnded);
        QTest::mouseClick(dialog.generateButton(), Qt::LeftButton);
        QVERIFY(dialog.running());
        QTest::mouseClick(dialog.stopButton(), Qt::LeftButton);  // before it could finish
        QVERIFY(test::wait_gui([&] { return !ended.isEmpty(); }));
        QVERIFY(!dialog.running());
        QVERIFY(!ended.front().at(0).toBool());
        QVERIFY2(dialog.status()->text().startsWith("Stopped"), qPrintable(dialog.status()->text()));
        QVERIFY(dialog.generateButton()->isEnabled());
    }
};

int run_suite(int argc, char** argv) {
    if (!*kGenerate || !QFileInfo(QString::fromUtf8(kGenerate)).isExecutable()) {
        std::printf("SKIP: this build has no mwb-generate target (%s)\n", *kGenerate ? kGenerate : "not defined");
        return 77;
    }
    QApplication app(argc, argv);
    TestGenerate t;
    return QTest::qExec(&t, argc, argv);
}

MWB_TEST_SUITE_MAIN(test_generate, run_suite)
}  // namespace test_generate
#include "test_generate.moc"
