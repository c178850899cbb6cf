#pragma once
// "Generate…": text from a finished run's checkpoint (History) or any checkpoint directory (File
// menu). A prompt box and the sampling settings; Generate runs `mwb-generate --json` as a QProcess
// (found as mwb-train is: core/paths.h find_generator()) and streams its tokens into the output as
// they arrive — the prompt highlighted, the completion after it; Stop ends the process; a failure
// shows the process's own error message on one line.
#include "app/launch/generate_stream.h"

#include <QDialog>
#include <QProcess>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTextBrowser;

namespace mwb::app {

/// What one generation asks for; arguments() is the command line after the program.
struct GenerateSettings {
    QString checkpoint;  ///< --load
    QString prompt;
    int max_new_tokens = 64;
    double temperature = 1.0;
    int top_k = 0;
    double top_p = 1.0;
    int seed = 1234;
    bool greedy = false;
    QString device = QStringLiteral("cpu");
    QStringList arguments() const;
};

class GenerateDialog : public QDialog {
    Q_OBJECT
public:
    /// `checkpoint`: the directory to load (editable); `title`: what it is ("run 2026…-gpt").
    explicit GenerateDialog(const QString& checkpoint, const QString& title = {}, QWidget* parent = nullptr);
    ~GenerateDialog() override;

    GenerateSettings settings() const;
    bool running() const { return process_.state() != QProcess::NotRunning; }
    /// The program it runs (empty: mwb-generate was not found; Generate says so).
    QString program() const { return program_; }
    void setProgram(const QString& program) { program_ = program; }

    QLineEdit* checkpointEdit() const { return checkpoint_; }
    QPlainTextEdit* promptEdit() const { return prompt_; }
    QSpinBox* maxNewTokens() const { return max_new_; }
    QDoubleSpinBox* temperature() const { return temperature_; }
    QSpinBox* topK() const { return top_k_; }
    QDoubleSpinBox* topP() const { return top_p_; }
    QSpinBox* seed() const { return seed_; }
    QCheckBox* greedy() const { return greedy_; }
    QPushButton* generateButton() const { return generate_; }
    QPushButton* stopButton() const { return stop_; }
    QTextBrowser* output() const { return output_; }
    QLabel* status() const { return status_; }
    /// The completion streamed so far (or the final one).
    const QString& completion() const { return completion_; }

public slots:
    void generate();
    void stop();

signals:
    /// The process ended: finished with a done event, stopped, or failed (then `error` is set).
    void generationEnded(bool ok, const QString& error);

private:
    void onOutput();
    void onFinished(int exit_code, QProcess::ExitStatus status);
    void handle(const GenerateEvent& e);
    void setStatus(const QString& text, bool error = false);
    void updateEnabled();
    void showCompletion(const QString& completion);

    QString program_;
    QProcess process_;
    GenerateStream stream_;
    QString completion_, error_, prompt_shown_;
    int tokens_ = 0;
    bool done_ = false, stopped_ = false;
    QByteArray stderr_tail_;

    QLineEdit* checkpoint_ = nullptr;
    QPlainTextEdit* prompt_ = nullptr;
    QSpinBox *max_new_ = nullptr, *top_k_ = nullptr, *seed_ = nullptr;
    QDoubleSpinBox *temperature_ = nullptr, *top_p_ = nullptr;
    QCheckBox* greedy_ = nullptr;
    QComboBox* device_ = nullptr;
    QPushButton *generate_ = nullptr, *stop_ = nullptr;
    QTextBrowser* output_ = nullptr;
    QLabel* status_ = nullptr;
};

}  // namespace mwb::app
