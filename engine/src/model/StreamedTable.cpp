#include "model/StreamedTable.hpp"

#include "k3/kernels.hpp"
#include "k3/model.hpp"

#include <algorithm>
#include <cstring>
#include <future>

namespace k3::model {
namespace {

constexpr std::uint64_t kAlign = kDirectIoAlignment;

std::uint64_t alignDown(std::uint64_t n) {
    return n / kAlign * kAlign;
}
std::uint64_t alignUpTo(std::uint64_t n) {
    return (n + kAlign - 1) / kAlign * kAlign;
}

// A window of `bytes` starting anywhere spans at most this many aligned bytes.
std::uint64_t windowBytes(std::uint64_t bytes) {
    return alignUpTo(bytes) + kAlign;
}

} // namespace

StreamedTable::StreamedTable(const std::filesystem::path& file, std::uint64_t offset, DType dtype,
                             int rows, int cols, const std::string& name, std::uint64_t blockBytes)
    : offset_(offset), dtype_(dtype), rows_(rows), cols_(cols), name_(name) {
    if (dtype != DType::BF16 && dtype != DType::F32)
        throw ModelError("tensor " + name + " is " + std::string(dtypeName(dtype)) +
                         "; streaming it from disk needs BF16 or F32 (keep it resident instead)");
    if (rows <= 0 || cols <= 0)
        throw ModelError("tensor " + name + " has an empty shape and cannot be streamed");
    rowBytes_ = std::uint64_t(cols) * (dtype == DType::BF16 ? 2 : 4);
    blockRows_ = int(std::clamp<std::uint64_t>(blockBytes / rowBytes_, 1, std::uint64_t(rows)));
    try {
        file_ = std::make_unique<AlignedFile>(file);
    } catch (const std::exception& e) {
        throw ModelError("tensor " + name + ": " + e.what());
    }
    if (offset + rowBytes_ * std::uint64_t(rows) > file_->size())
        throw ModelError("tensor " + name + " runs past the end of " + file.string());
    if (blockBytes > 0) {
        const std::uint64_t win = windowBytes(rowBytes_ * std::uint64_t(blockRows_));
        buf_[0] = memory::AlignedBuffer(std::size_t(win));
        buf_[1] = memory::AlignedBuffer(std::size_t(win));
    }
    rowBuf_ = memory::AlignedBuffer(std::size_t(windowBytes(rowBytes_)));
}

std::uint64_t StreamedTable::bufferBytes(std::uint64_t rowBytes, std::uint64_t blockBytes) {
    if (blockBytes == 0) return windowBytes(rowBytes);
    const std::uint64_t block = std::max(rowBytes, blockBytes / rowBytes * rowBytes);
    return 2 * windowBytes(block) + windowBytes(rowBytes);
}

std::uint64_t StreamedTable::bufferBytes() const {
    return buf_[0].size() + buf_[1].size() + rowBuf_.size();
}

const std::byte* StreamedTable::readRows(int first, int count, std::byte* buf) const {
    const std::uint64_t lo = offset_ + rowBytes_ * std::uint64_t(first);
    const std::uint64_t hi = lo + rowBytes_ * std::uint64_t(count);
    const std::uint64_t start = alignDown(lo);
    const std::uint64_t len = alignUpTo(hi) - start;
    std::size_t got = 0;
    try {
        got = file_->readWindow(start, buf, std::size_t(len));
    } catch (const std::exception& e) {
        throw ModelError("tensor " + name_ + " rows " + std::to_string(first) + ".." +
                         std::to_string(first + count - 1) + ": " + e.what());
    }
    if (got < hi - start)
        throw ModelError("tensor " + name_ + ": short read of rows " + std::to_string(first) +
                         ".." + std::to_string(first + count - 1) + " from " + file_->path() +
                         " (got " + std::to_string(got) + " of " + std::to_string(hi - start) +
                         " bytes)");
    bytesRead_ += hi - lo;
    return buf + (lo - start);
}

void StreamedTable::row(int r, float* out) const {
    const std::byte* p = readRows(r, 1, rowBuf_.data());
    if (dtype_ == DType::BF16) {
        for (int i = 0; i < cols_; ++i) {
            std::uint16_t v;
            std::memcpy(&v, p + 2 * std::size_t(i), 2);
            out[i] = bf16ToFloat(v);
        }
    } else {
        std::memcpy(out, p, std::size_t(cols_) * 4);
    }
}

void StreamedTable::matvec(float* y, const float* x) const {
    matmat(y, x, 1);
}

void StreamedTable::matmat(float* y, const float* x, int columns) const {
    if (!buf_[0].data())
        throw ModelError("tensor " + name_ + " was opened for rows only (no block buffers)");
    auto view = [&](const std::byte* p, int count) {
        return dtype_ == DType::BF16
                   ? WeightView::bf16(reinterpret_cast<const std::uint16_t*>(p), count, cols_)
                   : WeightView::f32(reinterpret_cast<const float*>(p), count, cols_);
    };
    std::vector<float> block; // [columns][rows of the block], scattered into y
    int first = 0, count = std::min(blockRows_, rows_);
    const std::byte* cur = readRows(first, count, buf_[0].data());
    int which = 0;
    while (first < rows_) {
        const int nextFirst = first + count;
        const int nextCount = std::min(blockRows_, rows_ - nextFirst);
        std::future<const std::byte*> next;
        if (nextCount > 0) {
            std::byte* dst = buf_[which ^ 1].data();
            next = std::async(std::launch::async, [this, nextFirst, nextCount, dst] {
                return readRows(nextFirst, nextCount, dst);
            });
        }
        // Each row by the resident kernel, in the same fixed order: identical bits.
        if (columns == 1) {
            k3::matvec(y + first, x, view(cur, count));
        } else {
            block.resize(std::size_t(columns) * std::size_t(count));
            k3::matmat(block.data(), x, view(cur, count), columns);
            for (int t = 0; t < columns; ++t)
                std::copy_n(block.data() + std::size_t(t) * count, count,
                            y + std::size_t(t) * std::size_t(rows_) + first);
        }
        if (nextCount <= 0) break;
        cur = next.get();
        which ^= 1;
        first = nextFirst;
        count = nextCount;
    }
}

} // namespace k3::model
