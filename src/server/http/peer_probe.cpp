#include "server/http/peer_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace kvlm {
namespace {

// The port of a socket address (IPv4 or IPv6), or -1.
int port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

std::string addr_of(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof(buf));
  else if (a.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof(buf));
  return buf;
}

bool matches(int fd, const std::string& remote_addr, int remote_port, int local_port) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;  // not a socket
  if (port_of(local) != local_port) return false;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;  // the listener
  return port_of(peer) == remote_port && addr_of(peer) == remote_addr;
}

}  // namespace

PeerProbe::PeerProbe(const std::string& remote_addr, int remote_port, int local_port) {
#if defined(__linux__)
  if (remote_port < 0 || local_port < 0) return;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    // Our connection is the one socket with both endpoints: a pair of
    // (address, port) identifies a TCP connection uniquely while it is open,
    // and the handler's thread keeps it open until the handler returns.
    if (matches(static_cast<int>(fd), remote_addr, remote_port, local_port)) {
      fd_ = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
#else
  (void)remote_addr, (void)remote_port, (void)local_port;
#endif
}

bool PeerProbe::peer_closed() const {
  if (fd_ < 0) return false;
  char byte;
  const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;  // orderly shutdown by the peer
  if (n > 0) return false;  // the client sent more (pipelining): still there
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // reset, etc.
}

}  // namespace kvlm
