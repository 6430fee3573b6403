#include "HostPolicy.hpp"

#include "CliSupport.hpp"

#include <k3/net.hpp>

#include <algorithm>
#include <cctype>

namespace k3cli {

namespace {

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    return s;
}

bool allDigits(const std::string& s, std::size_t maxLength) {
    return !s.empty() && s.size() <= maxLength &&
           std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

bool isIpv4(const std::string& s) {
    return k3::net::parseIpv4(s).has_value();
}

// "[...]" holding an IPv6 address.
bool isBracketedIpv6(const std::string& s) {
    if (s.size() < 3 || s.front() != '[' || s.back() != ']') return false;
    return k3::net::isIpv6Literal(s.substr(1, s.size() - 2));
}

bool isDnsName(const std::string& s) {
    return !s.empty() && s.size() <= 253 && std::all_of(s.begin(), s.end(), [](unsigned char c) {
        return std::isalnum(c) || c == '.' || c == '-' || c == '_';
    });
}

// The name of a Host header value or an origin's authority ("name[:port]"), lower case,
// without the port or a final dot; nothing when it is not one.
std::optional<std::string> authorityName(std::string value) {
    value = lower(value);
    std::string name, port;
    bool hasPort = false;
    if (value.starts_with("[")) {
        const std::size_t close = value.find(']');
        if (close == std::string::npos) return std::nullopt;
        name = value.substr(0, close + 1);
        const std::string rest = value.substr(close + 1);
        if (!rest.empty()) {
            if (rest[0] != ':') return std::nullopt;
            hasPort = true;
            port = rest.substr(1);
        }
        if (!isBracketedIpv6(name)) return std::nullopt;
    } else {
        const std::size_t colon = value.find(':');
        name = value.substr(0, colon);
        if (colon != std::string::npos) {
            hasPort = true;
            port = value.substr(colon + 1);
        }
        if (name.size() > 1 && name.back() == '.') name.pop_back();
        if (!isDnsName(name)) return std::nullopt;
    }
    if (hasPort && !allDigits(port, 5)) return std::nullopt;
    return name;
}

} // namespace

HostPolicy::HostPolicy(const std::string& boundHost, const std::vector<std::string>& allowHosts,
                       const std::vector<std::string>& corsOrigins) {
    names_ = {"127.0.0.1", "localhost", "[::1]"};
    const std::string bound = lower(boundHost);
    anyAddress_ = bound == "0.0.0.0" || bound == "::" || bound == "[::]";
    names_.insert(bound.find(':') != std::string::npos && !bound.starts_with("[")
                      ? "[" + bound + "]"
                      : bound);
    for (const std::string& given : allowHosts) {
        std::string name = lower(given);
        if (name.find(':') != std::string::npos && !name.starts_with("[")) name = "[" + name + "]";
        if (name.size() > 1 && name.back() == '.') name.pop_back();
        if (!isBracketedIpv6(name) && !isDnsName(name))
            throw usageError("--allow-host " + terminalSafe(given, false) +
                             ": give a host name or an address, without a port or a scheme "
                             "(e.g. --allow-host k3.lan)");
        names_.insert(name);
    }
    for (const std::string& given : corsOrigins) {
        std::string origin = lower(given);
        while (origin.ends_with("/")) origin.pop_back();
        const std::size_t scheme = origin.find("://");
        const bool web = origin.starts_with("http://") || origin.starts_with("https://");
        const std::string authority =
            scheme == std::string::npos ? std::string() : origin.substr(scheme + 3);
        if (given == "*" || given == "null")
            throw usageError("--cors-origin " + given +
                             ": name each origin (scheme://host[:port]); this one would let "
                             "any web page use the server");
        if (!web || authority.find('/') != std::string::npos || !authorityName(authority))
            throw usageError("--cors-origin " + terminalSafe(given, false) +
                             ": an origin is scheme://host[:port] with the scheme http or "
                             "https and no path (e.g. --cors-origin http://localhost:3000)");
        origins_.insert(origin);
    }
}

std::optional<std::string> HostPolicy::refuseHost(const std::string& host, bool present) const {
    if (!present) return std::nullopt;
    const std::optional<std::string> name = authorityName(host);
    if (name && names_.contains(*name)) return std::nullopt;
    // An address literal cannot be re-pointed by DNS; on a wildcard bind each names us.
    if (name && anyAddress_ && (isIpv4(*name) || isBracketedIpv6(*name))) return std::nullopt;
    return "Host \"" + terminalSafe(host, false) + "\" is not a name of this server (" +
           acceptedNames() + "); start k3 serve with --allow-host NAME to accept another name";
}

bool HostPolicy::originAllowed(const std::string& origin) const {
    return origins_.contains(lower(origin));
}

std::string HostPolicy::acceptedNames() const {
    std::string list;
    for (const std::string& n : names_) list += (list.empty() ? "" : ", ") + n;
    if (anyAddress_) list += ", any address of this machine";
    return list;
}

} // namespace k3cli
