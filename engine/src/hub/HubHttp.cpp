// libcurl and libcrypto plumbing for the hub: one-time init, escaping, status
// wording, a small GET for the API, and sha256.

#include "hub/HubInternal.hpp"

#include "k3/version.hpp"

#include <curl/curl.h>
#include <openssl/evp.h>

#include <mutex>

namespace k3::hub {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_) throw HubError(HubErrorKind::Io, "sha256: EVP_MD_CTX_new failed (out of memory)");
    reset();
}

Sha256::~Sha256() {
    EVP_MD_CTX_free(ctx_);
}

void Sha256::reset() {
    if (EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1)
        throw HubError(HubErrorKind::Io, "sha256: EVP_DigestInit_ex failed");
}

void Sha256::update(const void* data, std::size_t size) {
    if (size > 0 && EVP_DigestUpdate(ctx_, data, size) != 1)
        throw HubError(HubErrorKind::Io, "sha256: EVP_DigestUpdate failed");
}

std::string Sha256::hexDigest() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (EVP_DigestFinal_ex(ctx_, digest, &length) != 1)
        throw HubError(HubErrorKind::Io, "sha256: EVP_DigestFinal_ex failed");
    static const char* hex = "0123456789abcdef";
    std::string out;
    out.reserve(length * 2);
    for (unsigned int i = 0; i < length; ++i) {
        out.push_back(hex[digest[i] >> 4]);
        out.push_back(hex[digest[i] & 15]);
    }
    return out;
}

void ensureCurl() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string escapePath(const std::string& path) {
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : path) {
        bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                     c == '-' || c == '_' || c == '.' || c == '~' || c == '/';
        if (plain) {
            out.push_back(static_cast<char>(c));
        } else {
            out.push_back('%');
            out.push_back(hex[c >> 4]);
            out.push_back(hex[c & 15]);
        }
    }
    return out;
}

HubErrorKind kindForStatus(long status) {
    switch (status) {
    case 401:
        return HubErrorKind::Unauthorized;
    case 403:
        return HubErrorKind::Forbidden;
    case 404:
        return HubErrorKind::NotFound;
    default:
        return HubErrorKind::Http;
    }
}

std::string describeStatus(long status, const std::string& what) {
    std::string head = "HTTP " + std::to_string(status) + " for " + what + ": ";
    switch (status) {
    case 401:
        return head + "token missing or invalid (set HF_TOKEN or pass a token with read access)";
    case 403:
        return head + "access refused: the repo is gated, accept its license on the hub with "
                      "the account that owns the token";
    case 404:
        return head + "not found: check the repo name, the revision and the file name";
    default:
        return head + "the server refused the request";
    }
}

bool isTransientStatus(long status) {
    return status >= 500 || status == 408 || status == 429;
}

std::string userAgent() {
    return std::string(kProjectName) + "/" + kVersion;
}

namespace {

struct GetState {
    std::string body;
    std::size_t maxBytes = 0;
    bool tooLarge = false;
};

size_t writeToString(char* data, size_t size, size_t count, void* user) {
    auto* state = static_cast<GetState*>(user);
    size_t bytes = size * count;
    if (state->body.size() + bytes > state->maxBytes) {
        state->tooLarge = true;
        return 0;
    }
    state->body.append(data, bytes);
    return bytes;
}

} // namespace

void configureCurl(CURL* curl, const std::string& url, const std::string& token,
                   char* errorBuffer) {
    // curl copies every string option, so the user agent need not outlive this call.
    const std::string agent = userAgent();
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, agent.c_str());
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errorBuffer);
    if (!token.empty()) {
        curl_easy_setopt(curl, CURLOPT_HTTPAUTH, CURLAUTH_BEARER);
        curl_easy_setopt(curl, CURLOPT_XOAUTH2_BEARER, token.c_str());
    }
}

std::string httpGet(const std::string& url, const std::string& token, long timeoutSeconds,
                    std::size_t maxBytes) {
    ensureCurl();
    CURL* curl = curl_easy_init();
    if (!curl) throw HubError(HubErrorKind::Network, "curl_easy_init failed for " + url);
    GetState state;
    state.maxBytes = maxBytes;
    char errorBuffer[CURL_ERROR_SIZE] = {0};
    configureCurl(curl, url, token, errorBuffer);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, timeoutSeconds);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, writeToString);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &state);
    CURLcode rc = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(curl);
    if (rc == CURLE_HTTP_RETURNED_ERROR)
        throw HubError(kindForStatus(status), redactSecret(describeStatus(status, url), token));
    if (state.tooLarge)
        throw HubError(HubErrorKind::BadListing,
                       url + ": answer larger than " + std::to_string(maxBytes) + " bytes");
    if (rc != CURLE_OK) {
        std::string detail = errorBuffer[0] ? errorBuffer : curl_easy_strerror(rc);
        throw HubError(HubErrorKind::Network, redactSecret(url + ": " + detail, token));
    }
    return state.body;
}

} // namespace k3::hub
