#pragma once
// Spin boxes and combo boxes in a scrolling form change their value when the wheel passes over them
// while the user scrolls the form. guard_wheel() makes such a widget take wheel edits only once it
// has focus (click or Tab); before that the wheel scrolls what holds it.
class QWidget;

namespace mwb::app {

void guard_wheel(QWidget* input);

}  // namespace mwb::app
