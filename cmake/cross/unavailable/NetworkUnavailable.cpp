// libcurl and OpenSSL stand-ins for cross builds without them (K3_CROSS_NETWORK=OFF:
// Debian builds neither for MinGW). Every transfer ends at once with CURLE_NOT_BUILT_IN
// and a message saying so, which the hub (k3 download) and the remote client
// (k3 chat --remote) pass on: "<url>: the network (libcurl) is not in this build ...".
// Only the entry points the engine calls exist; nothing else is pretended.
#define CURL_DISABLE_TYPECHECK // plain functions below, not the type-checking macros
#include <curl/curl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

namespace {

constexpr const char* kNotBuilt =
    "the network (libcurl) is not in this build of k3 (a Windows cross build made without "
    "libcurl: K3_CROSS_NETWORK=OFF); use a build with it, or copy the model in by hand";

struct Easy {
    char* errorBuffer = nullptr; // CURLOPT_ERRORBUFFER, filled when the transfer "ends"
};

struct Multi {
    std::vector<Easy*> added;
    std::deque<CURLMsg> done;
};

CURLcode finish(Easy* easy) {
    if (easy && easy->errorBuffer)
        std::snprintf(easy->errorBuffer, CURL_ERROR_SIZE, "%s", kNotBuilt);
    return CURLE_NOT_BUILT_IN;
}

} // namespace

extern "C" {

CURLcode curl_global_init(long) {
    return CURLE_OK;
}

CURL* curl_easy_init(void) {
    return new Easy;
}

void curl_easy_cleanup(CURL* curl) {
    delete static_cast<Easy*>(curl);
}

CURLcode curl_easy_setopt(CURL* curl, CURLoption option, ...) {
    if (option == CURLOPT_ERRORBUFFER) {
        std::va_list args;
        va_start(args, option);
        static_cast<Easy*>(curl)->errorBuffer = va_arg(args, char*);
        va_end(args);
    }
    return CURLE_OK;
}

CURLcode curl_easy_perform(CURL* curl) {
    return finish(static_cast<Easy*>(curl));
}

// Nothing was received: every number is 0, every string null.
CURLcode curl_easy_getinfo(CURL*, CURLINFO info, ...) {
    std::va_list args;
    va_start(args, info);
    void* out = va_arg(args, void*);
    va_end(args);
    switch (info & CURLINFO_TYPEMASK) {
    case CURLINFO_LONG:
        *static_cast<long*>(out) = 0;
        break;
    case CURLINFO_DOUBLE:
        *static_cast<double*>(out) = 0;
        break;
    case CURLINFO_OFF_T:
        *static_cast<curl_off_t*>(out) = 0;
        break;
    default:
        *static_cast<void**>(out) = nullptr;
        break;
    }
    return CURLE_OK;
}

const char* curl_easy_strerror(CURLcode code) {
    return code == CURLE_OK ? "No error" : kNotBuilt;
}

CURLM* curl_multi_init(void) {
    return new Multi;
}

CURLMcode curl_multi_cleanup(CURLM* multi) {
    delete static_cast<Multi*>(multi);
    return CURLM_OK;
}

CURLMcode curl_multi_add_handle(CURLM* multi, CURL* curl) {
    static_cast<Multi*>(multi)->added.push_back(static_cast<Easy*>(curl));
    return CURLM_OK;
}

CURLMcode curl_multi_remove_handle(CURLM* multi, CURL* curl) {
    auto& added = static_cast<Multi*>(multi)->added;
    std::erase(added, static_cast<Easy*>(curl));
    return CURLM_OK;
}

// Every added transfer ends in this call, so none is left running.
CURLMcode curl_multi_perform(CURLM* multi, int* running) {
    auto* m = static_cast<Multi*>(multi);
    for (Easy* easy : m->added) {
        CURLMsg msg{};
        msg.msg = CURLMSG_DONE;
        msg.easy_handle = easy;
        msg.data.result = finish(easy);
        m->done.push_back(msg);
    }
    m->added.clear();
    *running = 0;
    return CURLM_OK;
}

CURLMsg* curl_multi_info_read(CURLM* multi, int* queued) {
    static thread_local CURLMsg current;
    auto* m = static_cast<Multi*>(multi);
    if (m->done.empty()) {
        *queued = 0;
        return nullptr;
    }
    current = m->done.front();
    m->done.pop_front();
    *queued = int(m->done.size());
    return &current;
}

CURLMcode curl_multi_poll(CURLM*, curl_waitfd*, unsigned int, int, int* numfds) {
    if (numfds) *numfds = 0;
    return CURLM_OK;
}

curl_slist* curl_slist_append(curl_slist* list, const char* text) {
    auto* node = static_cast<curl_slist*>(std::calloc(1, sizeof(curl_slist)));
    if (!node) return nullptr;
    node->data = static_cast<char*>(std::malloc(std::strlen(text) + 1));
    if (!node->data) {
        std::free(node);
        return nullptr;
    }
    std::strcpy(node->data, text);
    if (!list) return node;
    curl_slist* last = list;
    while (last->next) last = last->next;
    last->next = node;
    return list;
}

void curl_slist_free_all(curl_slist* list) {
    while (list) {
        curl_slist* next = list->next;
        std::free(list->data);
        std::free(list);
        list = next;
    }
}

// OpenSSL: the hub's SHA-256 and SHA-1, reached only after a download, which cannot
// happen here. Each digest fails, so a caller that gets this far says so.
EVP_MD_CTX* EVP_MD_CTX_new(void) {
    static char dummy;
    return reinterpret_cast<EVP_MD_CTX*>(&dummy);
}

void EVP_MD_CTX_free(EVP_MD_CTX*) {}

const EVP_MD* EVP_sha256(void) {
    return nullptr;
}

const EVP_MD* EVP_sha1(void) {
    return nullptr;
}

int EVP_DigestInit_ex(EVP_MD_CTX*, const EVP_MD*, ENGINE*) {
    return 0;
}

int EVP_DigestUpdate(EVP_MD_CTX*, const void*, size_t) {
    return 0;
}

int EVP_DigestFinal_ex(EVP_MD_CTX*, unsigned char*, unsigned int*) {
    return 0;
}

void OPENSSL_thread_stop(void) {}

} // extern "C"
