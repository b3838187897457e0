// Raw loopback TCP connections for tests whose clients must misbehave: hold
// a connection open silently, never read, or hang up halfway.
#pragma once

#include <chrono>
#include <string>

namespace kvlm::test {

// A connection to 127.0.0.1:`port`, -1 if it cannot connect. `receive_buffer`
// > 0 shrinks the socket's receive buffer first, so a client that never
// reads stalls the server's writes after a few kilobytes.
int connect_socket(int port, int receive_buffer = 0);
// A connection from `source` (any 127.x.y.z: all of 127/8 is loopback), so
// that a test can be several client addresses; -1 if it cannot connect.
int connect_socket_from(int port, const std::string& source);
// Raises this process's open-file limit to its hard limit (tests that hold
// thousands of sockets).
void raise_open_files();
// Writes all of `bytes`; false if the peer is gone.
bool send_all(int fd, const std::string& bytes);
void close_socket(int fd);
// What arrives on `fd` until the peer closes it or `timeout` passes.
struct Received {
  std::string bytes;
  bool closed = false;  // the peer closed (or reset) the connection
};
Received receive_until_close(int fd, std::chrono::milliseconds timeout);
// Whether the peer has closed `fd` (a read would return end-of-file or a reset); never blocks.
bool peer_closed(int fd);
// An HTTP/1.1 POST of a JSON body, with Connection: close.
std::string raw_post(const std::string& path, const std::string& json_body);

}  // namespace kvlm::test
