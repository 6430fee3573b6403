#pragma once

#include <QWizard>

#include "worker/LaunchConfigMetaType.h"

class MemoryPage;
class ModelSourcePage;
class PackPage;
class RemoteServerPage;
class SystemCheckPage;

// The first-run setup: check the computer, get the model, pack the trunk, choose memory.
// Every long step runs off the GUI thread.
class SetupWizard : public QWizard {
    Q_OBJECT
public:
    enum PageId { SystemCheck, ModelSource, Pack, Memory, RemoteServer };

    explicit SetupWizard(QWidget* parent = nullptr);

    SystemCheckPage* systemCheckPage() const { return m_systemCheck; }
    ModelSourcePage* modelSourcePage() const { return m_modelSource; }
    PackPage* packPage() const { return m_pack; }
    MemoryPage* memoryPage() const { return m_memory; }
    RemoteServerPage* remoteServerPage() const { return m_remote; }

    void accept() override;
    int nextId() const override;
    void cleanupPage(int id) override;

protected:
    void showEvent(QShowEvent* event) override;
    void moveEvent(QMoveEvent* event) override;
    // Follows the main window's moves and resizes until the wizard is moved itself.
    bool eventFilter(QObject* watched, QEvent* event) override;

signals:
    // The whole choice, exactly as the memory page planned it (trunkDir empty when
    // packing was skipped; the demo from page 1: everything resident).
    void setupFinished(const k3::LaunchConfig& config);
    // "Use a server" finished: the key is already on its way to the keychain.
    void serverChosen(const QString& url, const QString& model, const QString& apiKey);

private:
    // One size for every page, so Next and Back never resize the window (issue 21).
    void fixSize();
    void centreOnParent();

    SystemCheckPage* m_systemCheck;
    ModelSourcePage* m_modelSource;
    PackPage* m_pack;
    MemoryPage* m_memory;
    RemoteServerPage* m_remote;
    bool m_useServer = false; // page 1's "Use a server" leads to the server page
    bool m_placed = false;    // centred over the main window on the first show
    // On the first run the window manager places the main window after the wizard has
    // opened: the wizard stays centred on it until it is moved somewhere else.
    bool m_followOwner = true;
    QPoint m_centredAt; // where centreOnParent() put the frame last
};
