// The hub's file listing, the partial-model shard selection, and small helpers that
// need no network transfer of their own.

#include "hub/HubInternal.hpp"
#include "k3/json_limits.hpp"
#include "platform/Platform.hpp"

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>
#include <set>

namespace k3 {

const char* fileStateName(FileState state) {
    switch (state) {
    case FileState::Queued:
        return "queued";
    case FileState::Downloading:
        return "downloading";
    case FileState::Verifying:
        return "verifying";
    case FileState::Done:
        return "done";
    case FileState::Failed:
        return "failed";
    }
    return "unknown";
}

std::string resolveEndpoint(const DownloadOptions& options) {
    std::string endpoint = options.endpoint;
    if (endpoint.empty()) {
        const char* env = std::getenv("HF_ENDPOINT");
        endpoint = (env && *env) ? env : kDefaultHubEndpoint;
    }
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    return endpoint;
}

std::string resolveToken(const DownloadOptions& options) {
    const char* env = std::getenv("HF_TOKEN");
    const bool fromEnv = options.token.empty();
    std::string token = !fromEnv ? options.token : env ? std::string(env) : std::string();
    for (std::size_t i = 0; i < token.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(token[i]);
        if (c < 0x20 || c == 0x7f) {
            char byte[8];
            std::snprintf(byte, sizeof byte, "0x%02x", c);
            throw HubError(HubErrorKind::Unauthorized,
                           std::string(fromEnv ? "HF_TOKEN" : "the Hugging Face token") +
                               " holds a control character (byte " + byte + " at position " +
                               std::to_string(i) +
                               "); refusing to send it in an HTTP header: set the token "
                               "without line breaks or other control characters");
        }
    }
    return token;
}

std::string withoutUrlCredentials(std::string text) {
    for (std::size_t scheme = text.find("://"); scheme != std::string::npos;
         scheme = text.find("://", scheme + 3)) {
        const std::size_t host = scheme + 3;
        // The authority ends at the path, query or fragment, or where the URL does.
        std::size_t end = host;
        while (end < text.size() &&
               std::string_view("/?#\"' \t\r\n<>").find(text[end]) == std::string_view::npos)
            ++end;
        const std::size_t at = text.rfind('@', end == host ? host : end - 1);
        if (at != std::string::npos && at >= host && at < end) text.erase(host, at + 1 - host);
    }
    return text;
}

std::string redactSecret(std::string text, const std::string& secret) {
    text = withoutUrlCredentials(std::move(text));
    if (secret.empty()) return text;
    for (std::size_t at = text.find(secret); at != std::string::npos;
         at = text.find(secret, at + 3))
        text.replace(at, secret.size(), "***");
    return text;
}

bool isSafeFileName(const std::string& name) {
    if (name.empty() || name.size() > 4096 || name.front() == '/') return false;
    for (unsigned char c : name)
        if (c < 0x20 || c == 0x7f || c == '\\' || c == ':') return false;
    // Every component must be a plain name: no "", ".", "..".
    std::size_t start = 0;
    while (true) {
        std::size_t slash = name.find('/', start);
        std::string part =
            name.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
        if (part.empty() || part == "." || part == "..") return false;
        if (slash == std::string::npos) break;
        start = slash + 1;
    }
    return true;
}

namespace {

bool isHexOfLength(const std::string& text, std::size_t length) {
    if (text.size() != length) return false;
    for (char c : text)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return false;
    return true;
}

std::uint64_t readSize(const nlohmann::json& value, const std::string& where) {
    if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<long long>() >= 0))
        throw HubError(HubErrorKind::BadListing, where + " is not a non-negative integer");
    return value.get<std::uint64_t>();
}

} // namespace

std::vector<HubFile> parseFileList(const std::string& json) {
    if (const auto deep = jsonDepthProblem(json))
        throw HubError(HubErrorKind::BadListing, "model API answer: " + *deep);
    nlohmann::json root = nlohmann::json::parse(json, nullptr, false);
    if (root.is_discarded() || !root.is_object())
        throw HubError(HubErrorKind::BadListing, "model API answer is not a JSON object");
    auto siblings = root.find("siblings");
    if (siblings == root.end() || !siblings->is_array())
        throw HubError(HubErrorKind::BadListing, "model API answer has no \"siblings\" array");
    if (siblings->size() > kMaxListedFiles)
        throw HubError(HubErrorKind::BadListing,
                       "model API answer lists " + std::to_string(siblings->size()) +
                           " files, more than the " + std::to_string(kMaxListedFiles) +
                           " a checkpoint may have; refusing it (nothing was created)");
    std::vector<HubFile> files;
    std::set<std::string> seen;
    std::uint64_t listedBytes = 0; // checked: sizes that wrap would pass the space check
    for (std::size_t i = 0; i < siblings->size(); ++i) {
        const auto& entry = (*siblings)[i];
        std::string where = "siblings[" + std::to_string(i) + "]";
        if (!entry.is_object() || !entry.contains("rfilename") || !entry["rfilename"].is_string())
            throw HubError(HubErrorKind::BadListing, where + " has no \"rfilename\" string");
        HubFile file;
        file.name = entry["rfilename"].get<std::string>();
        if (!isSafeFileName(file.name))
            throw HubError(HubErrorKind::BadListing,
                           "refusing unsafe file name from the server: \"" + file.name + "\"");
        if (!seen.insert(file.name).second)
            throw HubError(HubErrorKind::BadListing, "file \"" + file.name + "\" listed twice");
        if (!entry.contains("size"))
            throw HubError(HubErrorKind::BadListing,
                           "file \"" + file.name + "\" has no \"size\" (was blobs=true asked?)");
        file.size = readSize(entry["size"], "size of \"" + file.name + "\"");
        if (__builtin_add_overflow(listedBytes, file.size, &listedBytes))
            throw HubError(HubErrorKind::BadListing,
                           "model API answer lists sizes that add up to more than 2^64 bytes "
                           "(at \"" +
                               file.name + "\", " + std::to_string(file.size) +
                               " bytes); the listing is not believable, refusing it");
        if (entry.contains("lfs") && entry["lfs"].is_object()) {
            const auto& lfs = entry["lfs"];
            if (lfs.contains("sha256")) {
                if (!lfs["sha256"].is_string() ||
                    !isHexOfLength(lfs["sha256"].get<std::string>(), 64))
                    throw HubError(HubErrorKind::BadListing,
                                   "lfs.sha256 of \"" + file.name + "\" is not 64 hex digits");
                file.sha256 = lfs["sha256"].get<std::string>();
                for (char& c : file.sha256)
                    if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
            }
            if (lfs.contains("size")) {
                std::uint64_t lfsSize = readSize(lfs["size"], "lfs.size of \"" + file.name + "\"");
                if (lfsSize != file.size)
                    throw HubError(HubErrorKind::BadListing,
                                   "\"" + file.name + "\": size " + std::to_string(file.size) +
                                       " disagrees with lfs.size " + std::to_string(lfsSize));
            }
        }
        // Non-LFS files (config.json, the tokenizer, the index) have no sha256 in the
        // listing, only their git blob id: checked instead of the size alone.
        if (file.sha256.empty() && entry.contains("blobId")) {
            const auto& blob = entry["blobId"];
            if (!blob.is_string() || !isHexOfLength(blob.get<std::string>(), 40))
                throw HubError(HubErrorKind::BadListing,
                               "blobId of \"" + file.name + "\" is not 40 hex digits");
            file.gitBlobSha1 = blob.get<std::string>();
            for (char& c : file.gitBlobSha1)
                if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
        }
        files.push_back(std::move(file));
    }
    return files;
}

std::vector<HubFile> fetchFileList(const DownloadOptions& options) {
    std::string url = resolveEndpoint(options) + "/api/models/" + hub::escapePath(options.repo) +
                      "/revision/" + hub::escapePath(options.revision) + "?blobs=true";
    std::string token = resolveToken(options);
    std::string body = hub::httpGet(url, token, 120, 64u << 20);
    try {
        return parseFileList(body);
    } catch (const HubError& error) {
        throw HubError(error.hubKind(), redactSecret(url + ": " + error.what(), token));
    }
}

namespace {

// Layer index of "...layers.17.xyz", or -1 for a tensor outside any layer.
long layerOfTensor(const std::string& tensor) {
    for (std::size_t at = tensor.find("layers."); at != std::string::npos;
         at = tensor.find("layers.", at + 1)) {
        if (at > 0 && tensor[at - 1] != '.') continue;
        std::size_t digits = at + 7;
        std::size_t end = digits;
        while (end < tensor.size() && end - digits < 9 && tensor[end] >= '0' && tensor[end] <= '9')
            ++end;
        if (end == digits || end >= tensor.size() || tensor[end] != '.') continue;
        return std::stol(tensor.substr(digits, end - digits));
    }
    return -1;
}

} // namespace

std::vector<std::string> shardsForLayers(const std::string& indexJson, int layers) {
    if (const auto deep = jsonDepthProblem(indexJson))
        throw HubError(HubErrorKind::BadListing, "model.safetensors.index.json: " + *deep);
    nlohmann::json root = nlohmann::json::parse(indexJson, nullptr, false);
    if (root.is_discarded() || !root.is_object() || !root.contains("weight_map") ||
        !root["weight_map"].is_object())
        throw HubError(HubErrorKind::BadListing,
                       "model.safetensors.index.json has no \"weight_map\" object");
    std::set<std::string> shards;
    for (const auto& [tensor, file] : root["weight_map"].items()) {
        if (!file.is_string())
            throw HubError(HubErrorKind::BadListing,
                           "weight_map[\"" + tensor + "\"] is not a file name");
        std::string name = file.get<std::string>();
        if (!isSafeFileName(name))
            throw HubError(HubErrorKind::BadListing,
                           "weight_map[\"" + tensor + "\"] names an unsafe file: \"" + name + "\"");
        long layer = layerOfTensor(tensor);
        if (layer < 0 || layer < layers) shards.insert(name);
    }
    return {shards.begin(), shards.end()};
}

std::string sha256OfFile(const std::filesystem::path& path) {
    std::FILE* in = platform::openStream(path, "rb");
    if (!in) throw HubError(HubErrorKind::Io, "cannot open " + path.string() + " to hash it");
    hub::Sha256 hash;
    std::vector<char> buffer(1 << 20);
    std::size_t got = 0;
    while ((got = std::fread(buffer.data(), 1, buffer.size(), in)) > 0)
        hash.update(buffer.data(), got);
    bool failed = std::ferror(in) != 0;
    std::fclose(in);
    if (failed) throw HubError(HubErrorKind::Io, "read error while hashing " + path.string());
    return hash.hexDigest();
}

std::string gitBlobSha1OfFile(const std::filesystem::path& path) {
    std::error_code ec;
    const std::uintmax_t size = std::filesystem::file_size(path, ec);
    if (ec) throw HubError(HubErrorKind::Io, "cannot open " + path.string() + " to hash it");
    std::FILE* in = platform::openStream(path, "rb");
    if (!in) throw HubError(HubErrorKind::Io, "cannot open " + path.string() + " to hash it");
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha1(), nullptr) != 1) {
        EVP_MD_CTX_free(ctx);
        std::fclose(in);
        throw HubError(HubErrorKind::Io, "sha1: cannot start a digest");
    }
    const std::string head = "blob " + std::to_string(size);
    EVP_DigestUpdate(ctx, head.c_str(), head.size() + 1); // the NUL ends the header
    std::vector<char> buffer(1 << 20);
    std::size_t got = 0;
    while ((got = std::fread(buffer.data(), 1, buffer.size(), in)) > 0)
        EVP_DigestUpdate(ctx, buffer.data(), got);
    const bool failed = std::ferror(in) != 0;
    std::fclose(in);
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    EVP_DigestFinal_ex(ctx, digest, &length);
    EVP_MD_CTX_free(ctx);
    if (failed) throw HubError(HubErrorKind::Io, "read error while hashing " + path.string());
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < length; ++i) {
        out += hex[digest[i] >> 4];
        out += hex[digest[i] & 15];
    }
    return out;
}

std::string DownloadResult::summary() const {
    std::size_t done = 0, sizeOk = 0, shaChecked = 0;
    for (const auto& file : files) {
        if (file.state == FileState::Done) ++done;
        if (file.state == FileState::Done && file.actualSize == file.expectedSize) ++sizeOk;
        if (file.state == FileState::Done && !file.expectedSha256.empty()) ++shaChecked;
    }
    std::string text = "files " + std::to_string(done) + "/" + std::to_string(files.size()) +
                       ", bytes " + std::to_string(bytesOnDisk) + "/" +
                       std::to_string(bytesExpected) +
                       (bytesOnDisk == bytesExpected ? " exact" : " short");
    text += ", sizes match " + std::to_string(sizeOk) + "/" + std::to_string(files.size());
    text += ", sha256 verified " + std::to_string(shaChecked);
    if (!ok)
        text += "; FAILED: " + (error.empty() ? std::string("see the per-file errors") : error);
    return text;
}

} // namespace k3
