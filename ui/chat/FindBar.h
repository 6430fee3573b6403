#pragma once

#include <QWidget>

class QLabel;
class QLineEdit;
class QToolButton;

// The find-in-conversation strip above the composer: a search field, "n of m",
// previous/next and close. Enter finds the next match, Shift+Enter the previous one,
// Esc closes the bar. It only reports what the user wants; ConversationView searches.
class FindBar : public QWidget {
    Q_OBJECT
public:
    explicit FindBar(QWidget* parent = nullptr);

    QLineEdit* field() const { return m_field; }
    QString text() const;
    QString resultText() const;
    // Shows the bar with the field focused and its text selected.
    void open();
    // `current` is 0-based; -1 when nothing matches.
    void setResult(int current, int total);

signals:
    void queryChanged(const QString& text);
    void nextRequested();
    void previousRequested();
    void closed();

public slots:
    void dismiss();

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    QLineEdit* m_field;
    QLabel* m_result;
    QToolButton* m_previous;
    QToolButton* m_next;
    QToolButton* m_close;
};
