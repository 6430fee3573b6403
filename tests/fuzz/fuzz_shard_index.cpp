// model.safetensors.index.json, as the checkpoint reader parses it (parseShardIndex)
// and as the downloader does to pick the shards of the first layers (shardsForLayers).
#include "FuzzSupport.hpp"

#include <k3/hub.hpp>
#include <k3/safetensors.hpp>

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text = k3fuzz::asText(data, size);
    try {
        const k3::ShardIndex idx = k3::parseShardIndex(text, "model.safetensors.index.json");
        for (const auto& [name, shard] : idx.tensorShard)
            k3fuzz::check(shard < idx.shardFiles.size(), "tensor names a shard out of range");
        for (const auto& f : idx.shardFiles)
            k3fuzz::check(k3::isSafeFileName(f), "an unsafe shard file name was accepted");
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
