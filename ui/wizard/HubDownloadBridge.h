#pragma once

#include <QPointer>

#include <k3/hub.hpp>

class ModelSourcePage;

// Receives the downloader's callbacks on engine worker threads and re-posts them to
// the GUI thread; the page may be gone by then, so every delivery checks a QPointer
// on the GUI thread before touching it.
class HubDownloadBridge : public k3::DownloadObserver {
public:
    explicit HubDownloadBridge(ModelSourcePage* page) : m_page(page) {}

    void onFileList(const std::vector<k3::HubFile>& files) override;
    void onFileProgress(const k3::FileProgress& progress) override;
    void onOverallProgress(const k3::OverallProgress& progress) override;
    void onMessage(const std::string& line) override;

private:
    QPointer<ModelSourcePage> m_page;
};
