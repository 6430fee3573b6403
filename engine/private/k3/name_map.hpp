#pragma once
// Tensor-name tables for half a million names (the checkpoint's index and headers), kept
// out of the public headers so that tsl::ordered_map is no dependency of a front end.

#include "k3/safetensors.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tsl/ordered_map.h>

namespace k3 {

// Heterogeneous lookup, so find(string_view) allocates nothing.
struct TensorNameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
        return std::hash<std::string_view>{}(s);
    }
};
// Name -> value: entries sit in one vector in insertion order (index or header order),
// behind 8-byte buckets, so building, probing and freeing cost a fraction of one heap
// node per entry. Iterate as pairs; modify a value through it.value() (it->second is
// const).
template <typename T>
using NameMap = tsl::ordered_map<std::string, T, TensorNameHash, std::equal_to<>,
                                 std::allocator<std::pair<std::string, T>>,
                                 std::vector<std::pair<std::string, T>>, std::uint32_t>;
using TensorMap = NameMap<TensorInfo>;

// Parse a model.safetensors.index.json text: tensor name -> shard file name, with the
// shard names validated (plain file names: no separators, no "..").
struct ShardIndex {
    std::vector<std::string> shardFiles; // distinct, sorted by name
    NameMap<std::uint32_t> tensorShard;
};
ShardIndex parseShardIndex(std::string_view json, const std::string& path);

} // namespace k3
