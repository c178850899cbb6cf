// Designer: every validation problem shows under the field that causes it, the plan panel follows
// each edit with what planner::plan() says for the same config and cluster (called here directly),
// presets load, auto-configure applies a ranked layout, and a saved design loads back through
// mwb-train's own config parser (and mwb-train itself accepts it).
#include "backend/config/config_io.h"
#include "app/core/config_file.h"
#include "app/core/format.h"
#include "app/core/paths.h"
#include "app/designer/auto_configure_dialog.h"
#include "app/designer/cluster_form.h"
#include "app/designer/config_form.h"
#include "app/designer/designer_view.h"
#include "app/designer/field_editor.h"
#include "app/designer/layout_model.h"
#include "app/designer/plan_panel.h"
#include "mwb/planner/presets.h"

#include "support/suite.h"

#include <QCheckBox>
#include <QComboBox>
#include <QGroupBox>
#include <QLabel>
#include <QLineEdit>
#include <QProcess>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>

#include <QtTest>

namespace test_designer {

using namespace mwb;
using namespace mwb::app;

namespace {

QSpinBox* spin(DesignerView& d, const char* field) {
    FieldEditor* e = d.form()->editor(QString::fromLatin1(field));
    return e ? qobject_cast<QSpinBox*>(e->input()) : nullptr;
}

QLineEdit* line(DesignerView& d, const char* field) {
    FieldEditor* e = d.form()->editor(QString::fromLatin1(field));
    return e ? qobject_cast<QLineEdit*>(e->input()) : nullptr;
}

/// The text shown under a field (its issue label), "" when hidden.
QString issue_text(DesignerView& d, const char* field) {
    FieldEditor* e = d.form()->editor(QString::fromLatin1(field));
    if (!e) return QStringLiteral("<no editor>");
    auto* l = e->findChild<QLabel*>(QString::fromLatin1(field) + QStringLiteral("_issue"));
    return l && !l->isHidden() ? l->text() : QString();
}

planner::Plan direct_plan(const DesignerView& d) {
    planner::PlanOptions o;
    o.train_tokens = d.planPanel()->trainTokens();
    return planner::plan(d.config(), d.cluster(), o);
}

}  // namespace

class TestDesigner : public QObject {
    Q_OBJECT
private slots:
    void init() {
        qputenv("XDG_DATA_HOME", tmp_.path().toUtf8());
        qputenv("MWB_STORE", (tmp_.path() + QStringLiteral("/history.sqlite")).toUtf8());
    }

    void startsWithTheTinyDemoThatFits() {
        DesignerView d;
        QCOMPARE(d.cluster().device.name, std::string("cpu"));
        QVERIFY(d.plan().estimated);
        QVERIFY2(d.plan().issues.empty(), qPrintable(d.planPanel()->headline()));
        QCOMPARE(d.config().model.num_layers, 4);
        QCOMPARE(d.config().model.hidden_size, 256);
        QVERIFY(d.planPanel()->headline().contains(QStringLiteral("Fits")));
    }

    void badFieldShowsItsProblemNextToIt() {
        DesignerView d;
        d.show();
        QVERIFY(issue_text(d, "tensor_model_parallel_size").isEmpty());
        // 4 heads cannot be split over 3 tensor-parallel ranks
        spin(d, "tensor_model_parallel_size")->setValue(3);
        d.replan();
        const planner::Plan p = direct_plan(d);
        QString expected;
        for (const auto& i : p.issues)
            if (i.field == "num_attention_heads" || i.field == "tensor_model_parallel_size")
                expected = QString::fromStdString(i.message);
        QVERIFY2(expected.contains(QStringLiteral("divisible")), qPrintable(expected));
        const QString shown = issue_text(d, "num_attention_heads") + issue_text(d, "tensor_model_parallel_size");
        QVERIFY2(shown.contains(expected), qPrintable(shown));
        // every issue the planner reports is either under its field or listed in the panel
        QCOMPARE(d.planPanel()->issueCount(), static_cast<int>(p.issues.size()));
        QVERIFY(d.planPanel()->headline().contains(QStringLiteral("No estimate")));
        // the issue label sits right under the field's input, inside the same editor
        FieldEditor* e = d.form()->editor(QStringLiteral("tensor_model_parallel_size"));
        if (!issue_text(d, "tensor_model_parallel_size").isEmpty()) {
            auto* l = e->findChild<QLabel*>(QStringLiteral("tensor_model_parallel_size_issue"));
            QVERIFY(l->geometry().top() >= e->input()->geometry().bottom());
        }
        // fixing it clears the problem
        spin(d, "tensor_model_parallel_size")->setValue(1);
        d.replan();
        QVERIFY(issue_text(d, "num_attention_heads").isEmpty());
        QVERIFY(issue_text(d, "tensor_model_parallel_size").isEmpty());
        QVERIFY(d.plan().issues.empty());
    }

    void textThatIsNoNumberIsShownUnderItsField() {
        DesignerView d;
        d.show();
        line(d, "lr")->setText(QStringLiteral("3e-4x"));
        d.replan();
        const QString shown = issue_text(d, "lr");
        QVERIFY2(shown.contains(QStringLiteral("not a number")), qPrintable(shown));
        QCOMPARE(d.config().training.lr, 0.003);  // the last valid value stays in use
        line(d, "lr")->setText(QStringLiteral("3e-4"));
        d.replan();
        QVERIFY(issue_text(d, "lr").isEmpty());
        QCOMPARE(d.config().training.lr, 3e-4);
    }

    void fieldOutsideTheModelIsFlaggedButStillEstimated() {
        DesignerView d;
        d.show();
        spin(d, "global_batch_size")->setValue(20);  // not a multiple of micro 16 × DP 1
        d.replan();
        const planner::Plan p = direct_plan(d);
        QVERIFY(!p.issues.empty());
        QString under;
        for (const auto& i : p.issues) under += issue_text(d, i.field.c_str());
        QVERIFY2(!under.isEmpty(), "the batch problem is not shown under a field");
    }

    void planPanelFollowsEveryEdit() {
        DesignerView d;
        struct Edit {
            const char* field;
            int value;
        };
        for (const Edit e : {Edit{"hidden_size", 512}, Edit{"num_layers", 8}, Edit{"seq_length", 256},
                             Edit{"micro_batch_size", 4}, Edit{"global_batch_size", 32}}) {
            QSpinBox* s = spin(d, e.field);
            QVERIFY2(s, e.field);
            QSignalSpy replanned(&d, &DesignerView::designChanged);
            s->setValue(e.value);
            // the edit replans on the next event-loop turn (a 0 ms single-shot timer)
            QTRY_VERIFY2(replanned.count() == 1, e.field);
            const planner::Plan p = direct_plan(d);
            QVERIFY2(p.estimated, e.field);
            PlanPanel* panel = d.planPanel();
            QCOMPARE(panel->figure(QStringLiteral("parameters")),
                     format_count(static_cast<double>(p.parameters.total)));
            QCOMPARE(panel->figure(QStringLiteral("iteration_time")), format_duration(p.time.iteration_s));
            QCOMPARE(panel->figure(QStringLiteral("tokens_per_s")), format_count(p.time.tokens_per_s));
            QCOMPARE(panel->figure(QStringLiteral("flops")), format_flops(p.flops.model));
            QCOMPARE(panel->figure(QStringLiteral("mfu")),
                     format_percent(p.time.mfu) + " / " + format_percent(p.time.hfu));
            QCOMPARE(d.plan().parameters.total, p.parameters.total);
            QCOMPARE(d.plan().most_loaded().peak_total, p.most_loaded().peak_total);
        }
        // 8 layers of hidden 512: 12·L·h² + embeddings, independently of the planner
        const double h = 512, L = 8;
        const double approx = 12 * L * h * h;
        QVERIFY(static_cast<double>(d.plan().parameters.total) > approx);
        QVERIFY(static_cast<double>(d.plan().parameters.total) < approx * 1.2);
    }

    void clusterEditReplansAndFlagsMemory() {
        DesignerView d;
        QVERIFY(d.loadPreset(QStringLiteral("gpt3-175b")));
        QVERIFY(d.plan().estimated);
        const double params = static_cast<double>(d.plan().parameters.total);
        QVERIFY2(params > 170e9 && params < 180e9, qPrintable(QString::number(params)));
        QCOMPARE(d.plan().cluster.device.name, std::string("A100-80GB"));
        // the same model with no model parallelism does not fit an 80 GB device: "memory" problem, in words
        spin(d, "tensor_model_parallel_size")->setValue(1);
        spin(d, "pipeline_model_parallel_size")->setValue(1);
        d.replan();
        QVERIFY(!d.plan().fits);
        QVERIFY(d.planPanel()->headline().contains(QStringLiteral("Does not fit")));
        QCOMPARE(d.plan().issues.size(), direct_plan(d).issues.size());
    }

    void presetsLoad() {
        DesignerView d;
        QVERIFY(d.loadPreset(QStringLiteral("mt-nlg-530b")));
        const double params = static_cast<double>(d.plan().parameters.total);
        QVERIFY2(params > 520e9 && params < 540e9, qPrintable(QString::number(params)));
        QString error;
        QVERIFY(!d.loadPreset(QStringLiteral("no-such-model"), &error));
        QVERIFY2(error.contains(QStringLiteral("gpt3-175b")), qPrintable(error));  // the error lists the presets
    }

    // The Llama-family fields have editors in named sections (none is left to "Other"), the Llama
    // presets are offered and load with their published parameter count, and a problem with one of
    // the new fields is shown under it.
    void llamaFieldsAndPresets() {
        DesignerView d;
        d.show();
        for (const char* f : {"group_query_attention", "num_query_groups", "kv_channels", "swiglu", "add_bias_linear",
                              "add_qkv_bias", "position_embedding_type", "rotary_base", "rotary_percent",
                              "rotary_interleaved", "use_rope_scaling", "rope_scaling_factor"}) {
            FieldEditor* e = d.form()->editor(QString::fromLatin1(f));
            QVERIFY2(e, f);
            QGroupBox* box = nullptr;
            for (QWidget* w = e; w && !box; w = w->parentWidget()) box = qobject_cast<QGroupBox*>(w);
            QVERIFY2(box && box->title() != QStringLiteral("Other"), f);
        }
        auto* presets = d.findChild<QComboBox*>(QStringLiteral("presets"));
        QVERIFY(presets && presets->findData(QStringLiteral("llama-3.1-8b")) >= 0);
        QVERIFY(d.loadPreset(QStringLiteral("llama-3.1-8b")));
        QCOMPARE(d.plan().parameters.unpadded(), int64_t{8'030'261'248});
        spin(d, "num_query_groups")->setValue(3);
        d.replan();
        const QString shown = issue_text(d, "num_query_groups");
        QVERIFY2(shown.contains(QStringLiteral("must be divisible by num_query_groups (3)")), qPrintable(shown));
    }

    void autoConfigureRanksAndApplies() {
        DesignerView d;
        QVERIFY(d.loadPreset(QStringLiteral("gpt3-1.3b")));
        d.setCluster(QStringLiteral("A100-80GB"), 8, 1);
        AutoConfigureDialog dialog(d.config(), d.cluster());
        dialog.start();
        dialog.waitForResult();
        QVERIFY(dialog.model()->rowCount() > 0);
        // ranked by predicted throughput, fastest first
        for (int r = 1; r < dialog.model()->rowCount(); ++r)
            QVERIFY(dialog.model()->layout(r - 1).plan.time.tokens_per_s >=
                    dialog.model()->layout(r).plan.time.tokens_per_s);
        dialog.selectRow(0);
        const Config chosen = dialog.chosen();
        d.setConfig(chosen);
        QCOMPARE(d.config().parallel.tensor_model_parallel_size, chosen.parallel.tensor_model_parallel_size);
        QCOMPARE(d.config().parallel.pipeline_model_parallel_size, chosen.parallel.pipeline_model_parallel_size);
        QVERIFY(d.plan().fits);
        QCOMPARE(d.plan().time.tokens_per_s, dialog.model()->layout(0).plan.time.tokens_per_s);
    }

    void saveLoadsBackThroughMwbTrainsParser() {
        DesignerView d;
        spin(d, "num_layers")->setValue(2);
        line(d, "train_iters")->setText(QStringLiteral("70"));
        line(d, "lr")->setText(QStringLiteral("0.0005"));
        qobject_cast<QCheckBox*>(d.form()->editor(QStringLiteral("mock_data"))->input())->setChecked(true);
        d.replan();
        const QString file = tmp_.path() + QStringLiteral("/design.json");
        QString error;
        QVERIFY2(d.saveFile(file, &error), qPrintable(error));
        QVERIFY(!d.modified());
        const Config loaded = load_config_file(to_path(file));  // what mwb-train --config does
        QVERIFY(same_config(loaded, d.config()));
        QCOMPARE(loaded.model.num_layers, 2);
        QCOMPARE(loaded.training.train_iters, 70);
        QCOMPARE(loaded.training.lr, 5e-4);
        QVERIFY(loaded.data.mock_data);
        // mwb-train itself accepts the file and resolves it to the same values
        const QString trainer = find_trainer();
        QVERIFY2(!trainer.isEmpty(), "mwb-train not built");
        QProcess train;
        train.start(trainer, {QStringLiteral("--config"), file, QStringLiteral("--print-config")});
        QVERIFY(train.waitForFinished(30000));
        QVERIFY2(train.exitCode() == 0, train.readAllStandardError().constData());
        const auto printed = nlohmann::json::parse(train.readAllStandardOutput().toStdString());
        QCOMPARE(printed.at("num_layers").get<int>(), 2);
        QCOMPARE(printed.at("train_iters").get<int>(), 70);
        QCOMPARE(printed.at("lr").get<double>(), 5e-4);
        QCOMPARE(printed.at("hidden_size").get<int>(), d.config().model.hidden_size);
        // and the Designer opens it again to the same design
        DesignerView e;
        QVERIFY2(e.openFile(file, &error), qPrintable(error));
        QVERIFY(same_config(e.config(), d.config()));
        QCOMPARE(e.currentFile(), file);
        // a file with an unknown key is refused with the key named (as mwb-train refuses it)
        QFile bad(tmp_.path() + QStringLiteral("/bad.json"));
        QVERIFY(bad.open(QIODevice::WriteOnly));
        bad.write("{\"num_layerz\": 3}\n");
        bad.close();
        QVERIFY(!e.openFile(bad.fileName(), &error));
        QVERIFY2(error.contains(QStringLiteral("num_layerz")), qPrintable(error));
    }

private:
    QTemporaryDir tmp_;
};

MWB_TEST_SUITE_WIDGETS(test_designer, TestDesigner)
}  // namespace test_designer
#include "test_designer.moc"
