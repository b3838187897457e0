// Noticing that the client of a non-streaming request has gone away.
//
// A streaming response finds out on its next write (or SSE keep-alive), but a
// non-streaming one writes nothing until the request ends, and cpp-httplib
// 0.11 (Debian 12) gives a handler no access to its connection. So the probe
// finds the connection's socket by its two endpoints, which the handler does
// know, and peeks at it: a peer that has closed its side reads as end-of-file.
// Linux only (it walks /proc/self/fd); elsewhere it never reports a hang-up.
#pragma once

#include <string>

namespace kvlm {

class PeerProbe {
 public:
  // The TCP connection from remote_addr:remote_port to our local_port.
  PeerProbe(const std::string& remote_addr, int remote_port, int local_port);

  // True once the peer has closed the connection (or reset it). Data the
  // client has sent meanwhile (a pipelined request) is left unread. Cheap:
  // one non-blocking recv with MSG_PEEK.
  bool peer_closed() const;

  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace kvlm
