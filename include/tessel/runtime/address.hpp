#pragma once
// A task's address as TF_CONFIG lists it, "host:port": a host name, an IPv4 address or an IPv6
// address in brackets ("[::1]:2222"), and a port from 1 to 65535. Both readers of TF_CONFIG
// (the synchronous strategies' and the parameter servers') check each entry with it, so that a
// host ZeroMQ or a resolver would refuse is named when the configuration is read, not later as
// "Invalid argument" from a socket.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessel::runtime {

struct host_port {
  std::string host;  // without brackets
  int port = 0;
  bool ipv6 = false;
};

namespace detail {
// A DNS host name (RFC 1123): labels of letters, digits and '-', none starting or ending with
// '-', each 1 to 63 characters, 253 in all.
inline bool is_host_name(std::string_view h) {
  if (h.empty() || h.size() > 253) return false;
  std::size_t label = 0;
  for (std::size_t i = 0; i < h.size(); ++i) {
    const char c = h[i];
    if (c == '.') {
      if (label == 0 || h[i - 1] == '-') return false;
      label = 0;
      continue;
    }
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && c != '-') return false;
    if (c == '-' && label == 0) return false;
    if (++label > 63) return false;
  }
  return h.back() != '-' && h.back() != '.';
}
// Whether `host` is a literal IP address, localhost, or this machine's host name (full or up to
// its first dot): the names resolved without asking a name server.
inline bool names_this_machine(const std::string& host) {
  in6_addr a6{};
  in_addr a4{};
  if (inet_pton(AF_INET, host.c_str(), &a4) == 1 || inet_pton(AF_INET6, host.c_str(), &a6) == 1)
    return true;
  if (host == "localhost") return true;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return false;
  const std::string mine = name;
  return host == mine || host == mine.substr(0, mine.find('.'));
}
}  // namespace detail

// The host and port of `address`, or why it is not an address (a phrase: "the port 70000 is not
// from 1 to 65535").
inline std::pair<std::optional<host_port>, std::string> parse_address(std::string_view address) {
  const auto colon = address.rfind(':');
  if (colon == std::string_view::npos) return {std::nullopt, "it has no ':port'"};
  const std::string_view host = address.substr(0, colon), port = address.substr(colon + 1);
  long value = port.empty() || port.size() > 5 ? -1 : 0;
  for (std::size_t i = 0; value >= 0 && i < port.size(); ++i)
    value = port[i] >= '0' && port[i] <= '9' ? value * 10 + (port[i] - '0') : -1;
  if (value < 1 || value > 65535)
    return {std::nullopt, "the port '" + std::string(port) + "' is not a number from 1 to 65535"};
  host_port out;
  out.port = static_cast<int>(value);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    out.host = std::string(host.substr(1, host.size() - 2));
    in6_addr a6{};
    if (inet_pton(AF_INET6, out.host.c_str(), &a6) != 1)
      return {std::nullopt, "'" + out.host + "' in brackets is not an IPv6 address"};
    out.ipv6 = true;
    return {out, ""};
  }
  out.host = std::string(host);
  if (host.find(':') != std::string_view::npos)
    return {std::nullopt, "an IPv6 address is written in brackets, as \"[::1]:2222\""};
  if (!detail::is_host_name(host))
    return {std::nullopt, "the host '" + out.host +
                              "' is not a host name (letters, digits, '-' and '.'), an IPv4 "
                              "address, or an IPv6 address in brackets"};
  return {out, ""};
}

// The IP addresses `host` resolves to, as text (empty when it does not resolve here: a name only
// the cluster's network knows).
inline std::set<std::string> resolve_host(const std::string& host) {
  std::set<std::string> out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &list) != 0) return out;
  for (addrinfo* a = list; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw =
        a->ai_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
    if (inet_ntop(a->ai_family, raw, text, sizeof text) != nullptr) out.insert(text);
  }
  freeaddrinfo(list);
  return out;
}

// The addresses of this machine's interfaces, loopback included.
inline std::set<std::string> local_addresses() {
  std::set<std::string> out{"127.0.0.1", "::1"};
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    const int family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw =
        family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr);
    if (inet_ntop(family, raw, text, sizeof text) != nullptr) out.insert(text);
  }
  freeifaddrs(list);
  return out;
}

// Two entries (each a name, "'cluster.ps' entry 0", and its address) that are the same port of
// this machine, however they spell it ("localhost:2222" and "127.0.0.1:2222"): a task listens on
// its port on every interface, so the second could not. Entries whose host does not resolve
// here, or is another machine, are left to that machine's check. Returns why, or nullopt.
inline std::optional<std::string> local_port_clash(
    const std::vector<std::pair<std::string, std::string>>& entries) {
  std::set<std::string> local;
  bool looked = false;
  std::vector<std::pair<int, std::size_t>> here;  // (port, entry) of the entries on this machine
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto [parsed, why] = parse_address(entries[i].second);
    if (!parsed) continue;
    // Only names that are this machine's by their spelling are resolved (a literal address,
    // localhost, this machine's host name): a lookup of another machine's name could wait on a
    // name server, and that machine checks its own entries.
    if (!detail::names_this_machine(parsed->host)) continue;
    const std::set<std::string> ips = resolve_host(parsed->host);
    if (ips.empty()) continue;
    if (!looked) local = local_addresses(), looked = true;
    bool mine = false;
    for (const std::string& ip : ips) mine = mine || local.count(ip) > 0;
    if (!mine) continue;
    for (const auto& [port, j] : here)
      if (port == parsed->port)
        return entries[j].first + " (\"" + entries[j].second + "\") and " + entries[i].first +
               " (\"" + entries[i].second + "\") are both port " + std::to_string(port) +
               " of this machine, where a task listens on its port on every interface; give "
               "each task a port of its own";
    here.emplace_back(parsed->port, i);
  }
  return std::nullopt;
}

}  // namespace tessel::runtime
