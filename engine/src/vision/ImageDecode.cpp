// PNG, JPEG and WebP decoding with the libraries Pillow itself uses (libpng's rules,
// libjpeg-turbo, libwebp), so a decoded image has Pillow's pixels and mode. The C
// libraries report errors by longjmp: each decode keeps its C++ objects outside the
// frame that calls setjmp, and throws only after the jump.
#include "k3/read_file.hpp"
#include "k3/vision.hpp"

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <jpeglib.h>
// After jpeglib.h, which it needs: the message codes (JWRN_JPEG_EOF).
#include <jerror.h>
#include <png.h>
#include <webp/decode.h>

namespace k3 {

namespace {

std::string sizeText(std::uint64_t w, std::uint64_t h) {
    return std::to_string(w) + "x" + std::to_string(h);
}

// Refuses an empty or oversized image from its header, before any pixel is decoded.
void checkSize(std::uint64_t width, std::uint64_t height, const std::string& name,
               const char* format) {
    if (width == 0 || height == 0)
        throw ImageError(name + ": the " + std::string(format) + " header says " +
                         sizeText(width, height) + " pixels; an image needs at least 1x1");
    if (width * height > kMaxImagePixels)
        throw ImageError(name + ": " + sizeText(width, height) + " pixels (" +
                         std::to_string(width * height / 1000000) + " M) is over the limit of " +
                         std::to_string(kMaxImagePixels) +
                         " pixels (a decompression bomb, or a picture to scale down first)");
}

// ---- PNG --------------------------------------------------------------------------------

struct PngContext {
    std::span<const std::byte> bytes;
    std::size_t offset = 0;
    char message[256] = {};
    std::jmp_buf jump;
};

void pngRead(png_structp png, png_bytep out, png_size_t count) {
    auto* ctx = static_cast<PngContext*>(png_get_io_ptr(png));
    if (ctx->bytes.size() - ctx->offset < count)
        png_error(png, "the file ends inside the image data (truncated)");
    std::memcpy(out, ctx->bytes.data() + ctx->offset, count);
    ctx->offset += count;
}

void pngError(png_structp png, png_const_charp message) {
    auto* ctx = static_cast<PngContext*>(png_get_error_ptr(png));
    std::snprintf(ctx->message, sizeof ctx->message, "%s", message);
    std::longjmp(ctx->jump, 1);
}

void pngWarning(png_structp, png_const_charp) {} // e.g. a known-incorrect sRGB profile

struct PngHandles {
    png_structp png = nullptr;
    png_infop info = nullptr;
    ~PngHandles() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

// Fills `out`; returns false after a libpng error (ctx.message says which).
bool decodePngInto(PngContext& ctx, PngHandles& h, DecodedImage& out, std::vector<png_bytep>& rows,
                   const std::string& name) {
    if (setjmp(ctx.jump)) return false;
    png_set_read_fn(h.png, &ctx, pngRead);
    png_read_info(h.png, h.info);
    const png_uint_32 width = png_get_image_width(h.png, h.info);
    const png_uint_32 height = png_get_image_height(h.png, h.info);
    const int colour = png_get_color_type(h.png, h.info);
    const int depth = png_get_bit_depth(h.png, h.info);
    // Only a size check may throw here: nothing of libpng's is mid-call.
    checkSize(width, height, name, "PNG");
    png_bytep transparent = nullptr;
    int transparentCount = 0;
    png_color_16p key = nullptr;
    const bool hasTrns =
        png_get_tRNS(h.png, h.info, &transparent, &transparentCount, &key) & PNG_INFO_tRNS;
    if (colour == PNG_COLOR_TYPE_PALETTE) {
        png_set_palette_to_rgb(h.png);
        if (hasTrns) png_set_tRNS_to_alpha(h.png);
        out.nearestResize = true; // Pillow's mode P
    } else if (hasTrns && key && depth <= 8) {
        // Pillow keeps the key in info["transparency"] and applies it at convert("RGBA"),
        // after the resize. Grey keys below 8 bits scale as the expanded samples do.
        const int scale = 255 / ((1 << depth) - 1);
        if (colour == PNG_COLOR_TYPE_GRAY)
            out.colourKey = {std::uint8_t(key->gray * scale), 0, 0};
        else
            out.colourKey = {std::uint8_t(key->red), std::uint8_t(key->green),
                             std::uint8_t(key->blue)};
    }
    if (colour == PNG_COLOR_TYPE_GRAY && depth < 8) {
        png_set_expand_gray_1_2_4_to_8(h.png);
        if (depth == 1) out.nearestResize = true; // Pillow's mode 1
    }
    if (depth == 16) png_set_strip_16(h.png); // Pillow keeps the high byte of RGB(A)
    png_set_interlace_handling(h.png);
    png_read_update_info(h.png, h.info);
    out.width = int(width);
    out.height = int(height);
    out.channels = png_get_channels(h.png, h.info);
    const std::size_t rowBytes = png_get_rowbytes(h.png, h.info);
    out.pixels.resize(rowBytes * height);
    rows.resize(height);
    for (png_uint_32 y = 0; y < height; ++y) rows[y] = out.pixels.data() + y * rowBytes;
    png_read_image(h.png, rows.data());
    return true;
}

std::uint32_t bigEndian32(const std::byte* p) {
    return std::uint32_t(p[0]) << 24 | std::uint32_t(p[1]) << 16 | std::uint32_t(p[2]) << 8 |
           std::uint32_t(p[3]);
}

DecodedImage decodePng(std::span<const std::byte> bytes, const std::string& name) {
    // IHDR is the first chunk: the size is refused before libpng reads on (png_read_info
    // reads every chunk up to the image data).
    if (bytes.size() >= 24 && std::memcmp(bytes.data() + 12, "IHDR", 4) == 0)
        checkSize(bigEndian32(bytes.data() + 16), bigEndian32(bytes.data() + 20), name, "PNG");
    PngContext ctx;
    ctx.bytes = bytes;
    ctx.offset = 8;
    PngHandles h;
    h.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, pngError, pngWarning);
    if (h.png) h.info = png_create_info_struct(h.png);
    if (!h.png || !h.info) throw ImageError(name + ": libpng could not start (out of memory)");
    png_set_sig_bytes(h.png, 8);
    DecodedImage out;
    out.format = "PNG";
    std::vector<png_bytep> rows;
    if (!decodePngInto(ctx, h, out, rows, name))
        throw ImageError(name + ": damaged PNG: " + ctx.message);
    return out;
}

// ---- JPEG -------------------------------------------------------------------------------

struct JpegErrors {
    jpeg_error_mgr base;
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX] = {};
};

void jpegError(j_common_ptr cinfo) {
    auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, e->message);
    std::longjmp(e->jump, 1);
}

// Pillow refuses a JPEG that ends early ("image file is truncated"); libjpeg only warns
// and fills the rest with grey. Other warnings (extraneous bytes) are ignored, as Pillow does.
void jpegMessage(j_common_ptr cinfo, int level) {
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpegError(cinfo);
}

struct JpegHandle {
    jpeg_decompress_struct cinfo;
    bool created = false;
    ~JpegHandle() {
        if (created) jpeg_destroy_decompress(&cinfo);
    }
};

enum class JpegOutcome { Decoded, Failed, Cmyk, TooLarge };

JpegOutcome decodeJpegInto(JpegHandle& h, JpegErrors& errors, std::span<const std::byte> bytes,
                           DecodedImage& out) {
    if (setjmp(errors.jump)) return JpegOutcome::Failed;
    jpeg_create_decompress(&h.cinfo);
    h.created = true;
    jpeg_mem_src(&h.cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
                 static_cast<unsigned long>(bytes.size()));
    jpeg_read_header(&h.cinfo, TRUE);
    out.width = int(h.cinfo.image_width);
    out.height = int(h.cinfo.image_height);
    if (h.cinfo.image_width == 0 || h.cinfo.image_height == 0 ||
        std::uint64_t(h.cinfo.image_width) * h.cinfo.image_height > kMaxImagePixels)
        return JpegOutcome::TooLarge;
    if (h.cinfo.jpeg_color_space == JCS_CMYK || h.cinfo.jpeg_color_space == JCS_YCCK)
        return JpegOutcome::Cmyk;
    h.cinfo.out_color_space = h.cinfo.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
    h.cinfo.dct_method = JDCT_ISLOW; // Pillow's default
    jpeg_start_decompress(&h.cinfo);
    out.channels = h.cinfo.output_components;
    const std::size_t rowBytes = std::size_t(out.width) * std::size_t(out.channels);
    out.pixels.resize(rowBytes * std::size_t(out.height));
    while (h.cinfo.output_scanline < h.cinfo.output_height) {
        JSAMPROW row = out.pixels.data() + rowBytes * h.cinfo.output_scanline;
        jpeg_read_scanlines(&h.cinfo, &row, 1);
    }
    jpeg_finish_decompress(&h.cinfo);
    return JpegOutcome::Decoded;
}

DecodedImage decodeJpeg(std::span<const std::byte> bytes, const std::string& name) {
    JpegHandle h;
    JpegErrors errors;
    h.cinfo.err = jpeg_std_error(&errors.base);
    errors.base.error_exit = jpegError;
    errors.base.emit_message = jpegMessage;
    DecodedImage out;
    out.format = "JPEG";
    switch (decodeJpegInto(h, errors, bytes, out)) {
    case JpegOutcome::Decoded:
        return out;
    case JpegOutcome::Failed:
        throw ImageError(name + ": damaged JPEG: " + errors.message);
    case JpegOutcome::Cmyk:
        throw ImageError(name + ": a CMYK JPEG; only greyscale and colour (YCbCr/RGB) JPEGs "
                                "are supported: save it as RGB");
    case JpegOutcome::TooLarge:
        checkSize(std::uint64_t(out.width), std::uint64_t(out.height), name, "JPEG");
    }
    throw ImageError(name + ": JPEG decoding failed");
}

// ---- WebP -------------------------------------------------------------------------------

DecodedImage decodeWebp(std::span<const std::byte> bytes, const std::string& name) {
    const auto* data = reinterpret_cast<const std::uint8_t*>(bytes.data());
    WebPBitstreamFeatures features;
    const VP8StatusCode status = WebPGetFeatures(data, bytes.size(), &features);
    if (status == VP8_STATUS_NOT_ENOUGH_DATA)
        throw ImageError(name + ": the WebP file ends inside its header (truncated)");
    if (status != VP8_STATUS_OK)
        throw ImageError(name + ": damaged WebP header (libwebp status " +
                         std::to_string(int(status)) + ")");
    if (features.has_animation)
        throw ImageError(name + ": an animated WebP; give one frame as a still image");
    checkSize(std::uint64_t(features.width), std::uint64_t(features.height), name, "WebP");
    DecodedImage out;
    out.format = "WebP";
    out.width = features.width;
    out.height = features.height;
    out.channels = features.has_alpha ? 4 : 3;
    const std::size_t stride = std::size_t(out.width) * std::size_t(out.channels);
    out.pixels.resize(stride * std::size_t(out.height));
    const std::uint8_t* ok = features.has_alpha
                                 ? WebPDecodeRGBAInto(data, bytes.size(), out.pixels.data(),
                                                      out.pixels.size(), int(stride))
                                 : WebPDecodeRGBInto(data, bytes.size(), out.pixels.data(),
                                                     out.pixels.size(), int(stride));
    if (!ok) throw ImageError(name + ": damaged or truncated WebP image data");
    return out;
}

bool startsWith(std::span<const std::byte> bytes, std::size_t at, const char* magic,
                std::size_t n) {
    return bytes.size() >= at + n && std::memcmp(bytes.data() + at, magic, n) == 0;
}

} // namespace

DecodedImage decodeImage(std::span<const std::byte> bytes, const std::string& name) {
    if (startsWith(bytes, 0, "\x89PNG\r\n\x1a\n", 8)) return decodePng(bytes, name);
    if (startsWith(bytes, 0, "\xff\xd8\xff", 3)) return decodeJpeg(bytes, name);
    if (startsWith(bytes, 0, "RIFF", 4) && startsWith(bytes, 8, "WEBP", 4))
        return decodeWebp(bytes, name);
    throw ImageError(
        name + ": not a PNG, JPEG or WebP image (" +
        (bytes.empty() ? std::string("the file is empty") : "its first bytes match none of them") +
        ")");
}

DecodedImage readImageFile(const std::filesystem::path& path) {
    const std::string text = readRegularFile(path, kMaxImageFileBytes, "image");
    return decodeImage(std::as_bytes(std::span<const char>(text.data(), text.size())),
                       path.string());
}

} // namespace k3
