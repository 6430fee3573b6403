#include "memory/AlignedBuffer.hpp"

#include "platform/Platform.hpp"

#include <new>
#include <string>

namespace k3::memory {

namespace {
constexpr std::size_t kHugePage = std::size_t{2} << 20;
}

AlignedBuffer::AlignedBuffer(std::size_t bytes) {
    if (bytes == 0) return;
    const std::size_t align = bytes >= kHugePage ? kHugePage : 4096;
    const std::size_t rounded = (bytes + align - 1) / align * align;
    void* p = platform::allocateAligned(align, rounded);
    if (!p) throw std::bad_alloc();
    if (align == kHugePage) platform::adviseHugePages(p, rounded);
    data_ = static_cast<std::byte*>(p);
    size_ = bytes;
}

AlignedBuffer::~AlignedBuffer() {
    platform::freeAligned(data_);
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
        platform::freeAligned(data_);
        data_ = o.data_;
        size_ = o.size_;
        o.data_ = nullptr;
        o.size_ = 0;
    }
    return *this;
}

} // namespace k3::memory
