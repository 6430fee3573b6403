#pragma once

#include <QWizardPage>

class RemoteServerForm;

// Wizard page reached from page 1's "Use a server": chat with a model served elsewhere
// (vLLM or SGLang on a GPU cluster, `k3 serve` on another computer) instead of a local
// checkpoint. The last page: Finish connects.
class RemoteServerPage : public QWizardPage {
    Q_OBJECT
public:
    explicit RemoteServerPage(QWidget* parent = nullptr);

    RemoteServerForm* form() const { return m_form; }
    bool isComplete() const override;
    int nextId() const override { return -1; }

private:
    RemoteServerForm* m_form;
};
