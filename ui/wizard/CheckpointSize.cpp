#include "wizard/CheckpointSize.h"

#include <filesystem>
#include <system_error>

#include <k3/memory_plan.hpp>

CheckpointSize::CheckpointSize(QObject* parent) : QObject(parent) {}

void CheckpointSize::request(const k3::DownloadOptions& options) {
    m_pending = true;
    m_answer = {};
    emit changed();
    m_listing.start([options] { return compute(options); });
}

void CheckpointSize::answered(const Answer& answer) {
    m_answer = answer;
    m_pending = false;
    emit changed();
}

CheckpointSize::Answer CheckpointSize::compute(const k3::DownloadOptions& options) {
    namespace fs = std::filesystem;
    try {
        Answer a;
        a.fromListing = true;
        a.total = 0;
        a.needed = 0;
        for (const k3::HubFile& file : k3::fetchFileList(options)) {
            // As the downloader: nested files (README figures) are not part of the checkpoint.
            if (file.name.find('/') != std::string::npos) continue;
            std::error_code ec;
            std::uint64_t have = 0;
            const fs::path final = options.destination / file.name;
            const fs::path partial = options.destination / (file.name + ".partial");
            if (const auto size = fs::file_size(final, ec); !ec && size == file.size)
                have = file.size;
            else if (const auto p = fs::file_size(partial, ec); !ec && p <= file.size)
                have = p;
            *a.total += file.size;
            *a.needed += file.size - have;
        }
        return a;
    } catch (const std::exception& e) {
        // No answer (offline, a token missing): the official checkpoint's size is still known.
        Answer a;
        if (const auto* hub = dynamic_cast<const k3::HubError*>(&e)) {
            if (hub->hubKind() == k3::HubErrorKind::Unauthorized) a.refusedWith = 401;
            if (hub->hubKind() == k3::HubErrorKind::Forbidden) a.refusedWith = 403;
        }
        if (options.repo == k3::kDefaultHubRepo && options.revision == k3::kDefaultHubRevision)
            a.total = a.needed = kOfficialBytes;
        return a;
    }
}

QString CheckpointSize::sizeText(quint64 bytes) {
    if (bytes >= 1'000'000'000'000ull)
        return QStringLiteral("%1 TB").arg(double(bytes) / 1e12, 0, 'f', 2);
    return QString::fromStdString(k3::formatBytes(bytes));
}
