// config.json: the model's dimensions. A config either parses into a consistent layer
// map or is refused with ConfigError.
#include "FuzzSupport.hpp"

#include <k3/config.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    try {
        const k3::ModelConfig c = k3::parseModelConfig(k3fuzz::asText(data, size), "config.json");
        k3fuzz::check(int(c.layers.size()) == c.numHiddenLayers, "layer map size");
        k3fuzz::check(c.countAttention(k3::AttentionKind::Kda) +
                              c.countAttention(k3::AttentionKind::Mla) ==
                          c.numHiddenLayers,
                      "attention kinds do not add up");
        k3fuzz::check(c.layerMapString().size() == c.layers.size(), "layer map string");
        (void)c.summary();
    } catch (const k3::ConfigError&) {
    }
    return 0;
}
