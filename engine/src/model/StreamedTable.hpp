#pragma once
// A [rows, cols] BF16/F32 table left on disk (the ultra preset's embeddings and
// lm_head, 4.7 GB on the real model): the embedding reads ONE row per token, and the
// lm_head product streams the table in row blocks through two bounded buffers (the
// next block's O_DIRECT read in flight while this one is multiplied). Each row is
// computed by the same kernel as the resident matvec, and rows are independent, so
// the logits are bit-identical to the resident run.

#include "k3/aligned_io.hpp"
#include "k3/safetensors.hpp"
#include "memory/AlignedBuffer.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace k3::model {

class StreamedTable {
public:
    // `offset`: the table's first byte in `file`. Refuses dtypes other than BF16/F32.
    // blockBytes 0: rows only (the embedding), no block buffers for matvec.
    StreamedTable(const std::filesystem::path& file, std::uint64_t offset, DType dtype, int rows,
                  int cols, const std::string& name, std::uint64_t blockBytes);

    // Row r widened to float, exactly as the resident embedding does.
    void row(int r, float* out) const;
    // y[rows] = W x, in row blocks.
    void matvec(float* y, const float* x) const;
    // y[columns][rows] = W x[columns][cols]: each block is read once for all columns.
    void matmat(float* y, const float* x, int columns) const;

    // Bytes this table holds in memory (the two block buffers, if any, and one row).
    static std::uint64_t bufferBytes(std::uint64_t rowBytes, std::uint64_t blockBytes);
    std::uint64_t bufferBytes() const;
    std::uint64_t bytesRead() const { return bytesRead_; }

private:
    // Reads rows [first, first+count) into `buf`; returns where row `first` starts.
    const std::byte* readRows(int first, int count, std::byte* buf) const;

    std::unique_ptr<AlignedFile> file_;
    std::uint64_t offset_ = 0;
    DType dtype_;
    int rows_ = 0, cols_ = 0;
    std::uint64_t rowBytes_ = 0;
    int blockRows_ = 0;
    std::string name_;
    mutable memory::AlignedBuffer buf_[2];
    mutable memory::AlignedBuffer rowBuf_;
    mutable std::uint64_t bytesRead_ = 0;
};

} // namespace k3::model
