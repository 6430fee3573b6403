#include "wizard/HubDownloadBridge.h"

#include <QCoreApplication>

#include "wizard/ModelSourcePage.h"

namespace {
// Runs `call` on the GUI thread if the page still exists then.
template <typename Fn> void post(const QPointer<ModelSourcePage>& page, Fn call) {
    QMetaObject::invokeMethod(
        QCoreApplication::instance(),
        [page, call = std::move(call)] {
            if (page) call(page.data());
        },
        Qt::QueuedConnection);
}
} // namespace

void HubDownloadBridge::onFileList(const std::vector<k3::HubFile>& files) {
    post(m_page, [files](ModelSourcePage* p) { p->showFileList(files); });
}

void HubDownloadBridge::onFileProgress(const k3::FileProgress& progress) {
    post(m_page, [progress](ModelSourcePage* p) { p->showFileProgress(progress); });
}

void HubDownloadBridge::onOverallProgress(const k3::OverallProgress& progress) {
    post(m_page, [progress](ModelSourcePage* p) { p->showOverallProgress(progress); });
}

void HubDownloadBridge::onMessage(const std::string& line) {
    post(m_page,
         [text = QString::fromStdString(line)](ModelSourcePage* p) { p->showLogLine(text); });
}
