#include "chat/FindBar.h"

#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QToolButton>

FindBar::FindBar(QWidget* parent)
    : QWidget(parent), m_field(new QLineEdit(this)), m_result(new QLabel(this)),
      m_previous(new QToolButton(this)), m_next(new QToolButton(this)),
      m_close(new QToolButton(this)) {
    setObjectName(QStringLiteral("findBar"));
    m_field->setObjectName(QStringLiteral("findField"));
    m_field->setPlaceholderText(tr("Find in conversation"));
    m_field->setAccessibleName(tr("Find in conversation"));
    m_field->setClearButtonEnabled(true);
    m_field->installEventFilter(this);
    m_result->setObjectName(QStringLiteral("findResult"));
    m_result->setAccessibleName(tr("Find result"));
    m_result->setMinimumWidth(m_result->fontMetrics().horizontalAdvance(tr("No matches")) + 8);
    m_previous->setObjectName(QStringLiteral("findPrevious"));
    m_previous->setArrowType(Qt::UpArrow);
    m_previous->setAccessibleName(tr("Previous match"));
    m_previous->setToolTip(tr("Previous match (Shift+Enter, Shift+F3)"));
    m_next->setObjectName(QStringLiteral("findNext"));
    m_next->setArrowType(Qt::DownArrow);
    m_next->setAccessibleName(tr("Next match"));
    m_next->setToolTip(tr("Next match (Enter, F3)"));
    m_close->setObjectName(QStringLiteral("findClose"));
    m_close->setText(QStringLiteral("✕"));
    m_close->setAccessibleName(tr("Close find"));
    m_close->setToolTip(tr("Close (Esc)"));
    m_close->setAutoRaise(true);

    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_field, 1);
    layout->addWidget(m_result);
    layout->addWidget(m_previous);
    layout->addWidget(m_next);
    layout->addWidget(m_close);

    connect(m_field, &QLineEdit::textChanged, this, &FindBar::queryChanged);
    connect(m_previous, &QToolButton::clicked, this, &FindBar::previousRequested);
    connect(m_next, &QToolButton::clicked, this, &FindBar::nextRequested);
    connect(m_close, &QToolButton::clicked, this, &FindBar::dismiss);
    setResult(-1, 0);
    hide();
}

QString FindBar::text() const {
    return m_field->text();
}

QString FindBar::resultText() const {
    return m_result->text();
}

void FindBar::open() {
    show();
    m_field->setFocus(Qt::ShortcutFocusReason);
    m_field->selectAll();
    if (!m_field->text().isEmpty()) emit queryChanged(m_field->text());
}

void FindBar::dismiss() {
    if (!isVisible()) return;
    hide();
    emit closed();
}

void FindBar::setResult(int current, int total) {
    if (m_field->text().isEmpty())
        m_result->clear();
    else if (total == 0)
        m_result->setText(tr("No matches"));
    else
        m_result->setText(tr("%1 of %2").arg(current + 1).arg(total));
    m_previous->setEnabled(total > 1);
    m_next->setEnabled(total > 1);
}

bool FindBar::eventFilter(QObject* watched, QEvent* event) {
    if (watched == m_field &&
        (event->type() == QEvent::ShortcutOverride || event->type() == QEvent::KeyPress)) {
        auto* key = static_cast<QKeyEvent*>(event);
        const bool enter = key->key() == Qt::Key_Return || key->key() == Qt::Key_Enter;
        if (key->key() == Qt::Key_Escape || enter) {
            // Claim the key before the window's Esc (stop) shortcut sees it.
            if (event->type() == QEvent::ShortcutOverride) {
                event->accept();
                return true;
            }
            if (key->key() == Qt::Key_Escape)
                dismiss();
            else if (key->modifiers() & Qt::ShiftModifier)
                emit previousRequested();
            else
                emit nextRequested();
            return true;
        }
    }
    return QWidget::eventFilter(watched, event);
}
