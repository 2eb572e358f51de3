// Telling whether the client of a request is still there. cpp-httplib 0.11.4 (Debian 12) only
// notices a closed peer when a write fails, so we ask the kernel whether the peer of the
// connection's socket (HttpServer::current_socket) has hung up.
#pragma once

namespace tq::serve {

// The peer closed its side or the connection failed (false for fd < 0: nothing to tell).
bool peer_gone(int fd);

}  // namespace tq::serve
