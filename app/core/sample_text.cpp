#include "app/core/sample_text.h"

#include "app/core/theme.h"

#include <QApplication>
#include <QPalette>
#include <QTextCursor>

namespace mwb::app {

QColor prompt_background() {
    return dark_theme() ? QColor(0x5a, 0x4a, 0x12) : QColor(0xff, 0xe9, 0xa8);  // amber, muted in the dark
}

QTextCharFormat prompt_format() {
    QTextCharFormat f;
    f.setBackground(prompt_background());
    f.setForeground(QApplication::palette().color(QPalette::Text));
    f.setFontWeight(QFont::DemiBold);
    return f;
}

QTextCharFormat completion_format() {
    QTextCharFormat f;
    f.setForeground(QApplication::palette().color(QPalette::Text));
    f.setFontWeight(QFont::Normal);
    return f;
}

QTextCharFormat note_format() {
    QTextCharFormat f;
    f.setForeground(QApplication::palette().color(QPalette::PlaceholderText));
    f.setFontWeight(QFont::Normal);
    if (QApplication::font().pointSizeF() > 0) f.setFontPointSize(QApplication::font().pointSizeF() * 0.9);
    return f;
}

QTextCharFormat heading_format() {
    QTextCharFormat f;
    f.setForeground(QApplication::palette().color(QPalette::Text));
    f.setFontWeight(QFont::Bold);
    return f;
}

void insert_sample_text(QTextCursor& cursor, const QString& prompt, const QString& completion) {
    cursor.insertText(prompt, prompt_format());
    cursor.insertText(completion, completion_format());
}

}  // namespace mwb::app
