#pragma once
// How generated text looks wherever the app shows it (the Monitor's Samples panel, History's prompt
// comparison, the Generate dialog): the prompt on a tinted background in semi-bold, the completion in
// the normal text colour right after it, notes (settings, finish reason) small and grey. Text goes in
// through QTextCursor, never as HTML, so whatever the model wrote is shown as it is.
#include <QColor>
#include <QString>
#include <QTextCharFormat>

class QTextCursor;

namespace mwb::app {

/// The prompt's background, readable in the light and the dark palette.
QColor prompt_background();
QTextCharFormat prompt_format();
QTextCharFormat completion_format();
QTextCharFormat note_format();
QTextCharFormat heading_format();

/// Inserts the prompt (highlighted) followed by the completion at `cursor`.
void insert_sample_text(QTextCursor& cursor, const QString& prompt, const QString& completion);

}  // namespace mwb::app
