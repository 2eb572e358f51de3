// Telling whether the client of a request is still there. cpp-httplib 0.11.4 (Debian 12) only
// notices a closed peer when a write fails, so we find the connection's socket by its two
// addresses and ask the kernel whether the peer has hung up.
#pragma once

#include <string>

namespace tq::serve {

// The socket of the connection from remote_addr:remote_port to our local_port, or -1. Valid
// while the handler of a request on that connection runs (it keeps the socket open).
int find_peer_socket(const std::string& remote_addr, int remote_port, int local_port);

// The peer closed its side or the connection failed (false for fd < 0: nothing to tell).
bool peer_gone(int fd);

}  // namespace tq::serve
