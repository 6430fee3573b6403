#pragma once

#include <QDialog>

class RemoteServerForm;

// Model > Use a server…: the wizard's server form in a dialog, filled from the last
// server used. OK connects (MainWindow reads the form).
class RemoteServerDialog : public QDialog {
    Q_OBJECT
public:
    explicit RemoteServerDialog(QWidget* parent = nullptr);

    RemoteServerForm* form() const { return m_form; }
    void accept() override;

private:
    RemoteServerForm* m_form;
};
