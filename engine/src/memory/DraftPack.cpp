// k3 pack --draft: the quantised trunk that proposes tokens (include/k3/draft.hpp).

#include "k3/draft.hpp"

#include "k3/chat.hpp"
#include "k3/json_limits.hpp"
#include "k3/kernels.hpp"
#include "k3/read_file.hpp"
#include "k3/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace k3 {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr std::uint64_t kMaxDraftJsonBytes = 1 << 20;

bool endsWith(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

struct Planned {
    std::string name;
    DType dtype;
    std::vector<std::uint64_t> shape;
    std::uint64_t bytes;
};

} // namespace

bool isDraftQuantised(std::string_view name, const TensorInfo& t) {
    // The embeddings are a table (one row read per token), a router decides which experts
    // run: both stay exact. Everything else 2-D and wide enough is a projection.
    return t.rank == 2 && t.shape[0] > 1 && t.shape[1] >= std::uint64_t(kMxfp4Group) &&
           (t.dtype == DType::BF16 || t.dtype == DType::F32) && endsWith(name, ".weight") &&
           name.find("embed_tokens") == std::string_view::npos && !endsWith(name, ".gate.weight");
}

namespace {

// Every non-expert tensor's place in the draft, in the checkpoint's order: a quantised
// projection as its packed rows and its scales, anything else as it is. The source
// bytes and the quantised tensors are counted into result.
std::vector<Planned> planDraft(const Checkpoint& ckpt, DraftPackResult& result) {
    std::vector<Planned> plan;
    for (const auto& [name, t] : ckpt.tensors()) {
        if (isRoutedExpertTensor(name)) continue;
        result.sourceBytes += t.nbytes;
        if (isDraftQuantised(name, t)) {
            const int rows = int(t.shape[0]), cols = int(t.shape[1]);
            plan.push_back({name + "_packed",
                            DType::U8,
                            {std::uint64_t(rows), std::uint64_t(mxfp4RowBytes(cols))},
                            std::uint64_t(rows) * mxfp4RowBytes(cols)});
            plan.push_back({name + "_scale",
                            DType::U8,
                            {std::uint64_t(rows), std::uint64_t(mxfp4ScalesPerRow(cols))},
                            std::uint64_t(rows) * mxfp4ScalesPerRow(cols)});
            ++result.quantised;
        } else {
            plan.push_back({name, t.dtype, {t.shape.begin(), t.shape.begin() + t.rank}, t.nbytes});
        }
    }
    return plan;
}

// The plan's safetensors header, padded with spaces to a multiple of 8 bytes; `payload`
// is set to the bytes of the tensors after it.
std::string draftHeader(const std::vector<Planned>& plan, std::uint64_t& payload) {
    json header = json::object();
    header["__metadata__"] = {{"format", "k3-draft"}, {"quantization", "mxfp4"}};
    std::uint64_t offset = 0;
    for (const Planned& p : plan) {
        header[p.name] = {{"dtype", std::string(dtypeName(p.dtype))},
                          {"shape", p.shape},
                          {"data_offsets", {offset, offset + p.bytes}}};
        offset += p.bytes;
    }
    payload = offset;
    std::string headerText = header.dump();
    headerText.append((8 - headerText.size() % 8) % 8, ' ');
    return headerText;
}

// A projection's rows quantised into packed and scales, in the order the file holds them.
void quantizeDraftTensor(const Checkpoint& ckpt, const std::string& name, const TensorInfo& t,
                         std::vector<std::uint8_t>& packed, std::vector<std::uint8_t>& scales) {
    const std::vector<float> w = ckpt.readFloats(name);
    const int rows = int(t.shape[0]), cols = int(t.shape[1]);
    const std::size_t rb = mxfp4RowBytes(cols), rs = mxfp4ScalesPerRow(cols);
    packed.assign(std::size_t(rows) * rb, 0);
    scales.assign(std::size_t(rows) * rs, 0);
    // Rows are independent: every core quantises. The first bad row (lowest
    // index) is the one reported, as a serial loop would.
    int badRow = rows;
    std::string badWhat;
#pragma omp parallel for schedule(dynamic, 64)
    for (int r = 0; r < rows; ++r) {
        try {
            quantizeMxfp4Row(w.data() + std::size_t(r) * std::size_t(cols), cols,
                             packed.data() + std::size_t(r) * rb,
                             scales.data() + std::size_t(r) * rs);
        } catch (const KernelError& e) {
#pragma omp critical(k3_draft_bad_row)
            if (r < badRow) {
                badRow = r;
                badWhat = e.what();
            }
        }
    }
    if (badRow < rows)
        throw PackError("tensor " + name + " row " + std::to_string(badRow) + ": " + badWhat);
}

// model.safetensors.partial: the header, then every planned tensor in the plan's order,
// each reported to the observer as it is written. A cancel removes the file.
void writeDraftFile(const fs::path& partial, const Checkpoint& ckpt, const std::string& headerText,
                    int records, DraftPackResult& result, const PackObserver& observer,
                    const std::atomic<bool>* cancel, std::chrono::steady_clock::time_point t0) {
    std::error_code ec;
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    if (!out) throw PackError(partial.string() + ": cannot create");
    const std::uint64_t n = headerText.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = (unsigned char)(n >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(headerText.data(), std::streamsize(headerText.size()));
    PackProgress progress;
    progress.recordsTotal = records; // source tensors
    progress.bytesTotal = result.sourceBytes;
    std::vector<std::uint8_t> packed, scales;
    for (const auto& [name, t] : ckpt.tensors()) {
        if (isRoutedExpertTensor(name)) continue;
        if (cancel && cancel->load()) {
            out.close();
            fs::remove(partial, ec);
            throw PackError("cancelled");
        }
        if (isDraftQuantised(name, t)) {
            quantizeDraftTensor(ckpt, name, t, packed, scales);
            out.write(reinterpret_cast<const char*>(packed.data()), std::streamsize(packed.size()));
            out.write(reinterpret_cast<const char*>(scales.data()), std::streamsize(scales.size()));
        } else {
            const std::vector<std::byte> raw = ckpt.readRaw(name);
            out.write(reinterpret_cast<const char*>(raw.data()), std::streamsize(raw.size()));
        }
        ++result.tensors;
        ++progress.recordsDone;
        progress.bytesDone += t.nbytes;
        progress.record = name;
        progress.seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        progress.mbPerSecond =
            progress.seconds > 0 ? double(progress.bytesDone) / 1e6 / progress.seconds : 0;
        if (observer) observer(progress);
    }
    out.flush();
    if (!out) throw PackError(partial.string() + ": write failed (disk full?)");
}

} // namespace

DraftPackResult packDraft(const fs::path& modelDir, const fs::path& draftDir,
                          const PackObserver& observer, const std::atomic<bool>* cancel) {
    const auto t0 = std::chrono::steady_clock::now();
    const Checkpoint ckpt = Checkpoint::open(modelDir);
    const CheckpointIdentity identity = checkpointIdentity(modelDir);
    std::error_code ec;
    fs::create_directories(draftDir, ec);
    if (ec) throw PackError(draftDir.string() + ": cannot create the folder: " + ec.message());

    // The header first: every tensor's dtype, shape and size are known from the source.
    DraftPackResult result;
    const std::vector<Planned> plan = planDraft(ckpt, result);
    std::uint64_t offset = 0;
    const std::string headerText = draftHeader(plan, offset);

    const fs::path file = draftDir / "model.safetensors";
    const fs::path partial = draftDir / "model.safetensors.partial";
    fs::remove(draftDir / "draft.json", ec); // a half-written draft never looks valid
    writeDraftFile(partial, ckpt, headerText, int(plan.size()) - result.quantised, result, observer,
                   cancel, t0);
    fs::rename(partial, file, ec);
    if (ec) throw PackError(file.string() + ": cannot rename the finished draft: " + ec.message());
    result.fileBytes = 8 + headerText.size() + offset;
    writeFileAtomically(draftDir / "config.json",
                        readRegularFile(modelDir / "config.json", kMaxConfigBytes, "config"));
    const json meta = {{"format", "k3-draft"},
                       {"version", kDraftFormatVersion},
                       {"quantization", "mxfp4"},
                       {"source", json::parse(checkpointIdentityJson(identity))}};
    writeFileAtomically(draftDir / "draft.json", meta.dump(2) + "\n");
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return result;
}

void checkDraft(const fs::path& draftDir, const fs::path& modelDir) {
    const fs::path metaPath = draftDir / "draft.json";
    if (!fs::exists(metaPath))
        throw PackError(draftDir.string() + " is not a draft trunk (no draft.json): make one",
                        PackRemedy{modelDir, draftDir, false, true});
    json meta;
    try {
        const std::string text = readRegularFile(metaPath, kMaxDraftJsonBytes, "draft description");
        if (const auto deep = jsonDepthProblem(text))
            throw PackError(metaPath.string() + ": " + *deep);
        meta = json::parse(text);
    } catch (const json::exception& e) {
        throw PackError(metaPath.string() + ": not JSON: " + e.what());
    }
    if (!meta.is_object() || meta.value("format", json()) != "k3-draft")
        throw PackError(metaPath.string() + ": \"format\" is not \"k3-draft\"");
    if (!meta.contains("version") || meta["version"] != kDraftFormatVersion)
        throw StaleTrunkError(metaPath.string() + ": draft format version " +
                                  (meta.contains("version") ? meta["version"].dump() : "missing") +
                                  ", this k3 reads version " + std::to_string(kDraftFormatVersion) +
                                  "; re-pack it",
                              PackRemedy{modelDir, draftDir, false, true});
    if (!meta.contains("source")) throw PackError(metaPath.string() + ": no \"source\"");
    const CheckpointIdentity packedFrom = parseCheckpointIdentityJson(meta["source"].dump());
    const std::string diff = checkpointIdentity(modelDir).differenceFrom(packedFrom);
    if (!diff.empty())
        throw StaleTrunkError("the draft in " + draftDir.string() + " does not match " +
                              modelDir.string() + ": " + diff);
}

} // namespace k3
