#include "GigabyteSpinBox.h"

#include <QKeyEvent>
#include <QLineEdit>

GigabyteSpinBox::GigabyteSpinBox(QWidget* parent) : QDoubleSpinBox(parent) {
    setRange(0, 4096);
    setDecimals(2);
    setSingleStep(0.5);
    setSuffix(tr(" GB"));
    lineEdit()->installEventFilter(this);
}

QValidator::State GigabyteSpinBox::validate(QString& text, int& pos) const {
    const QString point = locale().decimalPoint();
    QString typed = text;
    if (!typed.contains(point))
        for (const QString& other : {QStringLiteral("."), QStringLiteral(",")})
            if (other != point && typed.count(other) == 1) typed.replace(other, point);
    const QValidator::State state = QDoubleSpinBox::validate(typed, pos);
    if (state != QValidator::Invalid) text = typed; // the editor shows the locale's point
    return state;
}

void GigabyteSpinBox::keyPressEvent(QKeyEvent* event) {
    if (event->key() == Qt::Key_End && event->modifiers() == Qt::NoModifier) {
        lineEdit()->setCursorPosition(int(lineEdit()->text().size() - suffix().size()));
        event->accept();
        return;
    }
    QDoubleSpinBox::keyPressEvent(event);
}

bool GigabyteSpinBox::eventFilter(QObject* watched, QEvent* event) {
    if (watched == lineEdit() && event->type() == QEvent::MouseButtonDblClick) {
        selectAll(); // the number, not the suffix
        return true;
    }
    return QDoubleSpinBox::eventFilter(watched, event);
}
