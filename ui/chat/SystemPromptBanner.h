#pragma once

#include <QWidget>

class QLabel;
class QPushButton;

// A line above the conversation saying the system prompt it is answered with, so the
// Settings default is never applied unseen (a new chat says it starts with it), with a
// button that opens the conversation's dialog to change it for this chat. Hidden when
// there is no system prompt.
class SystemPromptBanner : public QWidget {
    Q_OBJECT
public:
    explicit SystemPromptBanner(QWidget* parent = nullptr);

    // `prompt` of the open conversation; `isDefault`: a new chat that will start with the
    // Settings default.
    void setPrompt(const QString& prompt, bool isDefault);
    // What the banner says, whole (the label elides it to its width).
    QString text() const { return m_full; }
    QPushButton* changeButton() const { return m_change; }

signals:
    void changeRequested();

protected:
    void resizeEvent(QResizeEvent* event) override;

private:
    void updateText();

    QLabel* m_label;
    QPushButton* m_change;
    QString m_prompt;
    QString m_full;
    bool m_isDefault = false;
};
