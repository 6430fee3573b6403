#pragma once
// Shared by the hub sources only: libcurl and libcrypto helpers.

#include "k3/hub.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

typedef struct evp_md_ctx_st EVP_MD_CTX;

namespace k3::hub {

// Incremental sha256 over OpenSSL's EVP interface.
class Sha256 {
public:
    Sha256();
    ~Sha256();
    Sha256(const Sha256&) = delete;
    Sha256& operator=(const Sha256&) = delete;
    void reset();
    void update(const void* data, std::size_t size);
    std::string hexDigest(); // finishes; call reset() before reuse

private:
    EVP_MD_CTX* ctx_ = nullptr;
};

// curl_global_init once per process.
void ensureCurl();

// Percent-encodes each path segment, keeping the '/' between them.
std::string escapePath(const std::string& path);

// "401 Unauthorized for WHAT: token missing or invalid ..." and its kind.
HubErrorKind kindForStatus(long status);
std::string describeStatus(long status, const std::string& what);

// A 5xx, 408 or 429 is worth retrying; other HTTP errors are final.
bool isTransientStatus(long status);

// GET url into body (at most maxBytes). Throws HubError with the status named.
std::string httpGet(const std::string& url, const std::string& token, long timeoutSeconds,
                    std::size_t maxBytes);

std::string userAgent();

} // namespace k3::hub
