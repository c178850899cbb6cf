#pragma once
// One configuration field as an editor, made from its row in the field table (backend/config/fields):
// a spin box for ints, a text box for floats, int64s and lists, a check box for bools, a combo box
// for strings with choices. It shows the field's problems (ConfigIssue.field) right under it.
#include "backend/config/config.h"
#include "backend/config/fields.h"

#include <QWidget>

class QLabel;

namespace mwb::app {

class FieldEditor : public QWidget {
    Q_OBJECT
public:
    FieldEditor(const Field& field, QWidget* parent = nullptr);

    const Field& field() const { return field_; }
    QString name() const { return QString::fromUtf8(field_.name.data(), static_cast<int>(field_.name.size())); }
    /// The label for the form ("Tensor-parallel size").
    QString label() const;
    QWidget* input() const { return input_; }

    void load(const Config& config);
    /// Writes the editor's value into `config`; false (and `error` set) when the text is not a value.
    bool store(Config& config, QString* error) const;
    /// Problems of this field, one per line (empty: none).
    void setIssues(const QStringList& messages);
    bool hasIssues() const { return has_issues_; }

signals:
    void edited();

private:
    const Field& field_;
    QWidget* input_ = nullptr;
    QLabel* issue_ = nullptr;
    bool has_issues_ = false;
    bool loading_ = false;
};

/// A readable label for a field name ("num_attention_heads" -> "Attention heads").
QString field_label(std::string_view name);

}  // namespace mwb::app
