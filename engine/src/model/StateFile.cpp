// Session::saveState / loadState: a conversation's state on disk (docs/state-format.md).
//
// Layout: "K3STATE1", the header's length (u64 LE), the header (JSON), its XXH3-64 (u64
// LE), then the sections the header lists, in its order, as raw little-endian bytes.
// Every section has its own XXH3-64 so a damaged byte is named by section.

#include "io/Xxh3.hpp"
#include "k3/chat.hpp"
#include "k3/pack.hpp"
#include "k3/read_file.hpp"
#include "k3/session.hpp"
#include "model/InferenceStateData.hpp"
#include "model/SessionImpl.hpp"

#include <nlohmann/json.hpp>

#include <bit>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace k3 {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "state files are little-endian");

constexpr std::string_view kMagic = "K3STATE1";
constexpr int kFormat = 1;
// Bump whenever any kernel's arithmetic changes: a state computed by other arithmetic
// would continue with bits that a fresh run does not give.
constexpr int kNumerics = 1;
constexpr std::uint64_t kMaxStateHeaderBytes = 64ull << 20;

// One stored array: its name, where its bytes are in memory, and how many there are.
struct Section {
    std::string name;
    const void* data = nullptr;
    std::uint64_t bytes = 0;
};

std::string hex64(std::uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
    return buf;
}

std::string_view bytesOf(const void* data, std::uint64_t n) {
    return {static_cast<const char*>(data), std::size_t(n)};
}

template <typename T> Section sectionOf(std::string name, const std::vector<T>& v) {
    return {std::move(name), v.data(), std::uint64_t(v.size() * sizeof(T))};
}

// The sections of a state, in file order: ids, logits, then per layer its non-empty
// arrays (a KDA layer's recurrent state and ShortConv tails, an MLA layer's latent
// cache and rope keys).
std::vector<Section> sectionsOf(const std::vector<TokenId>& ids, const std::vector<float>& logits,
                                const std::vector<model::LayerState>& layers) {
    std::vector<Section> out;
    out.push_back(sectionOf("ids", ids));
    out.push_back(sectionOf("logits", logits));
    for (std::size_t L = 0; L < layers.size(); ++L) {
        const model::LayerState& l = layers[L];
        const std::string at = "layer " + std::to_string(L) + " ";
        for (const auto& [name, v] : {std::pair{"S", &l.S}, std::pair{"q_conv", &l.qConv},
                                      std::pair{"k_conv", &l.kConv}, std::pair{"v_conv", &l.vConv},
                                      std::pair{"latent", &l.latent}, std::pair{"rope", &l.rope}})
            if (!v->empty()) out.push_back(sectionOf(at + name, *v));
    }
    return out;
}

// The arrays a state of `positions` positions has for this model, sized, for loading
// into: a fresh state's fixed parts, and the MLA caches grown to `positions`.
void sizeForPositions(std::vector<model::LayerState>& layers, const ModelConfig& c, int positions) {
    for (std::size_t L = 0; L < layers.size(); ++L) {
        if (c.layers[L].attention == AttentionKind::Kda) continue;
        layers[L].latent.resize(std::size_t(positions) * std::size_t(c.kvLoraRank));
        layers[L].rope.resize(std::size_t(positions) * std::size_t(c.qkRopeHeadDim));
    }
}

json identityJson(const fs::path& modelDir) {
    return json::parse(checkpointIdentityJson(checkpointIdentity(modelDir)));
}

// Throws StateError "FILE: WHY".
[[noreturn]] void refuse(const fs::path& path, const std::string& why) {
    throw StateError(path.string() + ": " + why);
}

std::uint64_t readU64(std::istream& in, const fs::path& path, const char* what) {
    unsigned char b[8];
    if (!in.read(reinterpret_cast<char*>(b), 8)) refuse(path, std::string("truncated in ") + what);
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | b[i];
    return v;
}

std::string u64Bytes(std::uint64_t v) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[std::size_t(i)] = char((v >> (8 * i)) & 0xff);
    return out;
}

// The header's fields, each checked against what this session is; the first difference
// is the refusal.
void checkBinding(const json& h, const fs::path& path, const Session::Impl& s) {
    const auto field = [&](const char* name) -> const json& {
        if (!h.contains(name)) refuse(path, std::string("the header has no \"") + name + "\"");
        return h.at(name);
    };
    if (field("format") != kFormat)
        refuse(path, "state format " + field("format").dump() + "; this k3 reads format " +
                         std::to_string(kFormat));
    if (field("numerics") != kNumerics)
        refuse(path, "saved by an engine with other arithmetic (numerics " +
                         field("numerics").dump() + ", this one " + std::to_string(kNumerics) +
                         "): its continuation would not be this engine's");
    const CheckpointIdentity saved = parseCheckpointIdentityJson(field("model").dump());
    const std::string diff = checkpointIdentity(s.modelDir).differenceFrom(saved);
    if (!diff.empty()) refuse(path, "saved from another model: " + diff);
    if (field("layers") != s.model.layersBound())
        refuse(path, "saved with " + field("layers").dump() + " layers; this session runs " +
                         std::to_string(s.model.layersBound()));
    if (field("vocab_size") != s.model.config().vocabSize)
        refuse(path, "vocab_size " + field("vocab_size").dump() + ", the model's " +
                         std::to_string(s.model.config().vocabSize));
    const json& positions = field("positions");
    if (!positions.is_number_integer() || positions.get<std::int64_t>() < 1)
        refuse(path, "\"positions\" is " + positions.dump() + "; a state holds at least one");
    const int context = s.model.memoryPlan().contextLength;
    if (context > 0 && positions.get<std::int64_t>() >= context)
        refuse(path, "it holds " + positions.dump() + " positions and the context holds " +
                         std::to_string(context) + "; raise the context length");
}

// What loadState reads before it replaces the conversation.
struct LoadedArrays {
    std::vector<TokenId> ids;
    std::vector<float> logits;
    std::vector<model::LayerState>& layers;
};
void readSections(const json& h, std::istream& in, const fs::path& path, const Session::Impl& s,
                  LoadedArrays& into);

} // namespace

void Session::saveState(const fs::path& path) const {
    impl_->saveState(path);
}

void Session::loadState(const fs::path& path) {
    impl_->loadState(path);
}

std::string Session::Impl::stateBinding() const {
    const json binding = {{"format", kFormat},
                          {"numerics", kNumerics},
                          {"model", identityJson(modelDir)},
                          {"layers", model.layersBound()},
                          {"vocab_size", model.config().vocabSize}};
    const std::string text = binding.dump();
    return hex64(XXH3_64bits(text.data(), text.size()));
}

void Session::Impl::saveState(const fs::path& path) const {
    saveState(path, state, fed, logits);
}

void Session::Impl::saveState(const fs::path& path, const InferenceState& held,
                              const std::vector<TokenId>& ids,
                              const std::vector<float>& lastLogits) const {
    const Impl& s = *this;
    if (ids.empty()) throw StateError("nothing to save: the conversation holds no position");
    const std::vector<Section> sections = sectionsOf(ids, lastLogits, held.d_->layers);
    json list = json::array();
    for (const Section& sec : sections)
        list.push_back({{"name", sec.name},
                        {"bytes", sec.bytes},
                        {"xxh3", hex64(XXH3_64bits(sec.data, std::size_t(sec.bytes)))}});
    const json header = {{"format", kFormat},
                         {"numerics", kNumerics},
                         {"model", identityJson(s.modelDir)},
                         {"layers", s.model.layersBound()},
                         {"vocab_size", s.model.config().vocabSize},
                         {"positions", ids.size()},
                         {"sections", list}};
    const std::string text = header.dump();
    const std::string lead = std::string(kMagic) + u64Bytes(text.size());
    const std::string seal = u64Bytes(XXH3_64bits(text.data(), text.size()));
    std::vector<std::string_view> pieces = {lead, text, seal};
    for (const Section& sec : sections) pieces.push_back(bytesOf(sec.data, sec.bytes));
    writeFileAtomically(path, pieces);
}

void Session::Impl::loadState(const fs::path& path) {
    Impl& s = *this;
    try {
        requireRegularFile(path, "state file");
    } catch (const FileReadError& e) {
        throw StateError(e.what());
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) refuse(path, "cannot open it");
    char magic[8];
    if (!in.read(magic, 8) || std::string_view(magic, 8) != kMagic)
        refuse(path, "not a k3 state file (no K3STATE1 at the start)");
    const std::uint64_t headerBytes = readU64(in, path, "the header length");
    if (headerBytes > kMaxStateHeaderBytes)
        refuse(path, "a header of " + std::to_string(headerBytes) + " bytes is not believable");
    std::string text(std::size_t(headerBytes), '\0');
    if (!in.read(text.data(), std::streamsize(headerBytes)))
        refuse(path, "truncated in the header");
    if (readU64(in, path, "the header checksum") != XXH3_64bits(text.data(), text.size()))
        refuse(path, "the header's checksum fails: the file is damaged");
    // Values nested deeper than the format's three levels are dropped while parsing, so
    // nothing recursive ever walks a deep structure.
    const json h = json::parse(
        text, [](int depth, json::parse_event_t, json&) { return depth <= 4; }, false);
    if (!h.is_object()) refuse(path, "the header is not a JSON object");
    // Into a fresh state, so a refusal leaves the conversation as it was; the prompt
    // snapshot goes first, so two states at most are held, as the plan counts.
    s.promptSnapshot.reset();
    s.promptSnapshotIds.clear();
    s.promptSnapshotMedia.clear();
    InferenceState loaded = s.model.newState();
    LoadedArrays arrays{{}, std::vector<float>(s.logits.size()), loaded.d_->layers};
    try {
        readSections(h, in, path, s, arrays);
    } catch (const json::exception& e) {
        refuse(path, std::string("the header is malformed (") + e.what() + ")");
    }
    loaded.d_->length = int(arrays.ids.size());
    s.state = std::move(loaded);
    s.fed = std::move(arrays.ids);
    s.fedMedia.clear(); // a file holds no image rows
    s.logits = std::move(arrays.logits);
    s.logitsRestored = true;
    s.resume.clear();
    if (s.draftState) s.draftState->reset(); // the draft catches up by reading: it is cheap
    s.draftSeen.clear();
}

namespace {

// loadState's second half: the binding, then every section read and checked into
// `into` (a fresh state's arrays, sized here).
void readSections(const json& h, std::istream& in, const fs::path& path, const Session::Impl& s,
                  LoadedArrays& into) {
    checkBinding(h, path, s);
    const int positions = h.at("positions").get<int>();
    into.ids.resize(std::size_t(positions));
    sizeForPositions(into.layers, s.model.config(), positions);
    const std::vector<Section> expected = sectionsOf(into.ids, into.logits, into.layers);
    const json& list = h.contains("sections") ? h.at("sections") : json();
    if (!list.is_array() || list.size() != expected.size())
        refuse(path, "it lists " + (list.is_array() ? std::to_string(list.size()) : "no") +
                         " sections; a state of " + std::to_string(positions) +
                         " positions for this model has " + std::to_string(expected.size()));
    for (std::size_t i = 0; i < expected.size(); ++i) {
        const Section& want = expected[i];
        const json& got = list[i];
        if (!got.is_object() || got.value("name", "") != want.name ||
            got.value("bytes", std::uint64_t(0)) != want.bytes)
            refuse(path, "section " + std::to_string(i + 1) + " is " + got.dump() +
                             "; expected \"" + want.name + "\" of " + std::to_string(want.bytes) +
                             " bytes");
        // Read straight into the fresh arrays (the sections point at them).
        char* bytes = static_cast<char*>(const_cast<void*>(want.data));
        if (!in.read(bytes, std::streamsize(want.bytes)))
            refuse(path, "truncated in section \"" + want.name + "\"");
        const std::string sum = hex64(XXH3_64bits(bytes, std::size_t(want.bytes)));
        if (sum != got.value("xxh3", ""))
            refuse(path, "section \"" + want.name + "\" fails its checksum (XXH3 " + sum +
                             ", the header says " + got.value("xxh3", "") +
                             "): the file is damaged");
    }
    if (in.peek() != std::char_traits<char>::eof())
        refuse(path, "bytes after the last section: the file is not what its header says");
    for (TokenId id : into.ids)
        if (id < 0 || id >= s.model.config().vocabSize)
            refuse(path, "token id " + std::to_string(id) + " is outside the vocabulary");
}

} // namespace

} // namespace k3
