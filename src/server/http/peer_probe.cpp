#include "server/http/peer_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "server/http/own_fds.h"

namespace kvlm {
namespace {

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
  if (socket_port(local) != local_port) return false;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;  // the listener
  return socket_port(peer) == remote_port && addr_of(peer) == remote_addr;
}

}  // namespace

PeerProbe::PeerProbe(const std::string& remote_addr, int remote_port, int local_port) {
  if (remote_port < 0 || local_port < 0) return;
  // Our connection is the one socket with both endpoints: a pair of
  // (address, port) identifies a TCP connection uniquely while it is open,
  // and the handler's thread keeps it open until the handler returns.
  fd_ = visit_own_fds([&](int fd) { return matches(fd, remote_addr, remote_port, local_port); });
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
