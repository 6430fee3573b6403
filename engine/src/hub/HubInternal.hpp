#pragma once
// Shared by the hub sources only: libcurl and libcrypto helpers.

#include "k3/hub.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

typedef struct evp_md_ctx_st EVP_MD_CTX;
typedef void CURL; // as curl/curl.h declares it

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

// The options every hub request shares: the URL, redirects (at most 10, http and https
// only), HTTP errors as failures, no signals, k3's user agent, the error buffer (kept
// alive by the caller, CURL_ERROR_SIZE bytes) and, when token is not empty, the bearer.
// curl drops the bearer on a redirect to another host (the CDN's URL is signed).
void configureCurl(CURL* curl, const std::string& url, const std::string& token, char* errorBuffer);

} // namespace k3::hub
