// model.safetensors.index.json, as the checkpoint reader parses it (parseShardIndex)
// and as the downloader does to pick the shards of the first layers (shardsForLayers).
#include "FuzzSupport.hpp"

#include <k3/hub.hpp>
#include <k3/name_map.hpp>
#include <k3/safetensors.hpp>

#include <string>

namespace {

// parseShardIndex's promise: a plain name in the model folder, no control characters.
// (The downloader's isSafeFileName is stricter still, e.g. it refuses ':'.)
bool isPlainName(const std::string& name) {
    if (name.empty() || name == "." || name.find("..") != std::string::npos) return false;
    for (const char c : name)
        if (c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
            return false;
    return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text = k3fuzz::asText(data, size);
    try {
        const k3::ShardIndex idx = k3::parseShardIndex(text, "model.safetensors.index.json");
        for (const auto& [name, shard] : idx.tensorShard)
            k3fuzz::check(shard < idx.shardFiles.size(), "tensor names a shard out of range");
        for (const auto& f : idx.shardFiles)
            k3fuzz::check(isPlainName(f), "a shard name that is not a plain file name");
    } catch (const k3::FormatError&) {
    }
    for (int layers : {1, 3}) {
        try {
            for (const auto& f : k3::shardsForLayers(std::string(text), layers))
                k3fuzz::check(k3::isSafeFileName(f), "shardsForLayers accepted an unsafe name");
        } catch (const k3::HubError&) {
        }
    }
    return 0;
}
