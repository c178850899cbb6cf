#include "app/core/wheel_guard.h"

#include <QEvent>
#include <QWidget>

namespace mwb::app {

namespace {

class WheelGuard : public QObject {
public:
    using QObject::QObject;

protected:
    bool eventFilter(QObject* watched, QEvent* event) override {
        if (event->type() == QEvent::Wheel && !static_cast<QWidget*>(watched)->hasFocus()) {
            // filtered and ignored: QApplication hands the wheel to the parents (the scroll area)
            event->ignore();
            return true;
        }
        return QObject::eventFilter(watched, event);
    }
};

}  // namespace

void guard_wheel(QWidget* input) {
    input->setFocusPolicy(Qt::StrongFocus);  // not Qt::WheelFocus: the wheel must not take focus
    input->installEventFilter(new WheelGuard(input));
}

}  // namespace mwb::app
