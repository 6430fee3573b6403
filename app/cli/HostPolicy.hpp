#pragma once
// Which requests k3 serve answers by their Host and Origin headers. A web page cannot
// read a local server's answers unless the server lets it: DNS rebinding (a name the
// page controls, re-pointed at 127.0.0.1) sends the page's own name as Host, and a
// cross-site request sends the page's Origin. So only Host names of this server are
// served, and an Origin only when CORS was opted in for it. Clients that are no web
// page (curl, the SDKs) send no Origin and a Host naming the address they dialled.

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace k3cli {

class HostPolicy {
public:
    // `boundHost` is --host; throws a usage error naming a malformed --allow-host or
    // --cors-origin value.
    HostPolicy(const std::string& boundHost, const std::vector<std::string>& allowHosts,
               const std::vector<std::string>& corsOrigins);

    // Why a Host header value is refused; nothing when it names this server. An absent
    // Host (HTTP/1.0) is accepted.
    std::optional<std::string> refuseHost(const std::string& host, bool present) const;
    // True for an Origin given with --cors-origin (compared without case).
    bool originAllowed(const std::string& origin) const;
    bool corsEnabled() const { return !origins_.empty(); }

    // The names accepted, for messages: "127.0.0.1, localhost, [::1]".
    std::string acceptedNames() const;

private:
    std::set<std::string> names_;   // lower case; IPv6 literals in brackets
    std::set<std::string> origins_; // lower case, no trailing slash
    bool anyAddress_ = false;       // --host 0.0.0.0 or ::: every address literal names us
};

} // namespace k3cli
