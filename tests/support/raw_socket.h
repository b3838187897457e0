// Raw loopback TCP connections for tests whose clients must misbehave: hold
// a connection open silently, never read, or hang up halfway.
#pragma once

#include <string>

namespace kvlm::test {

// A connection to 127.0.0.1:`port`, -1 if it cannot connect. `receive_buffer`
// > 0 shrinks the socket's receive buffer first, so a client that never
// reads stalls the server's writes after a few kilobytes.
int connect_socket(int port, int receive_buffer = 0);
// Writes all of `bytes`; false if the peer is gone.
bool send_all(int fd, const std::string& bytes);
void close_socket(int fd);
// An HTTP/1.1 POST of a JSON body, with Connection: close.
std::string raw_post(const std::string& path, const std::string& json_body);

}  // namespace kvlm::test
