// This process's own sockets, found where cpp-httplib 0.11 (Debian 12) keeps
// them out of reach: the listening socket (connection_limit.h) and a
// request's connection (peer_probe.h).
#pragma once

#include <sys/socket.h>

#include <functional>

namespace kvlm {

// The port of a socket address (IPv4 or IPv6), or -1.
int socket_port(const sockaddr_storage& a);

// Calls visit(fd) for each open file descriptor of this process until it
// returns true; returns that fd, or -1 when none did. Linux only (it walks
// /proc/self/fd); elsewhere it visits nothing.
int visit_own_fds(const std::function<bool(int fd)>& visit);

}  // namespace kvlm
