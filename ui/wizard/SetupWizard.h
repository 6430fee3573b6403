#pragma once

#include <QWizard>

class SystemCheckPage;

// The first-run setup: check the computer, get the model, pack the trunk, choose memory.
// Pages are added as each capability lands; every long step runs off the GUI thread.
class SetupWizard : public QWizard {
    Q_OBJECT
public:
    enum PageId { SystemCheck };

    explicit SetupWizard(QWidget* parent = nullptr);

    SystemCheckPage* systemCheckPage() const { return m_systemCheck; }

private:
    SystemCheckPage* m_systemCheck;
};
