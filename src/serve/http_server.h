// cpp-httplib's server with whole-request time limits. Its read timeout applies to each read
// only, so a client that drips its request line and headers (or a body that cpp-httplib reads
// itself) one byte at a time could hold an HTTP thread forever; here each connection's reads go
// through a stream that also keeps a deadline for the request's head and one for its body.
#pragma once

#include <httplib.h>

#include <cstddef>

namespace tq::serve {

// What the reads of the request handled on this thread ran into.
enum class ReadLimit { kNone, kHeadTimeout, kHeadTooLarge, kBodyTimeout };

struct HttpLimits {
  double head_timeout_s = 10;  // request line and headers, from the request's first byte
  double body_timeout_s = 30;  // the body, from the end of the head
  size_t max_head_bytes = size_t{64} << 10;
};

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(const HttpLimits& limits) : limits_(limits) {}

  // Called on the request's thread once its head is parsed (the pre-routing handler): the
  // head deadline ends and the body's starts.
  static void head_done();
  // The limit the current request's reads hit on this thread (kNone off an HTTP thread).
  static ReadLimit read_limit();
  // The socket of the connection handled on this thread (-1 off an HTTP thread).
  static int current_socket();
  // After binding: the listen backlog (cpp-httplib 0.11.4 listens with 5, so a burst of more
  // connections than that has SYNs dropped and retried a second or more later).
  bool set_backlog(int n);

 private:
  // Overrides cpp-httplib's per-connection loop (keep-alive, one request after another) to
  // read through the deadline-keeping stream.
  bool process_and_close_socket(socket_t sock) override;

  HttpLimits limits_;
};

}  // namespace tq::serve
