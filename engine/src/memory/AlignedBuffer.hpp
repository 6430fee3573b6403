#pragma once
// A page-aligned arena for O_DIRECT destinations. Large arenas ask for transparent
// hugepages: an O_DIRECT read pins its destination pages, and a multi-GB slot on 4 KB
// pages costs hundreds of thousands of page operations per read.

#include <cstddef>
#include <cstdint>

namespace k3::memory {

class AlignedBuffer {
public:
    AlignedBuffer() = default;
    explicit AlignedBuffer(std::size_t bytes);
    ~AlignedBuffer();
    AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), size_(o.size_) {
        o.data_ = nullptr;
        o.size_ = 0;
    }
    AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
    AlignedBuffer(const AlignedBuffer&) = delete;
    AlignedBuffer& operator=(const AlignedBuffer&) = delete;

    std::byte* data() const { return data_; }
    std::size_t size() const { return size_; }

private:
    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
};

} // namespace k3::memory
