#include "serve/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <functional>

namespace tq::serve {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// poll() on one event, retried on EINTR; waits until `until` (at least not at all).
int poll_until(int fd, short events, Clock::time_point until) {
  for (;;) {
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, static_cast<int>(std::clamp<int64_t>(ms, 0, INT_MAX)));
    if (r >= 0 || errno != EINTR) return r;
  }
}

// Address and port of a socket's peer or local end, printed as cpp-httplib's Request has them.
void socket_address(int fd, bool peer, std::string& addr, int& port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  auto* sa = reinterpret_cast<sockaddr*>(&ss);
  addr.clear();
  port = 0;
  if ((peer ? getpeername(fd, sa, &len) : getsockname(fd, sa, &len)) != 0) return;
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf)) addr = buf;
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf)) addr = buf;
    port = ntohs(a->sin6_port);
  }
}

// A connection's socket, read through a buffer (cpp-httplib reads request lines a byte at a
// time) within both the per-read timeout and the current request's head or body deadline.
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(int fd, const HttpLimits& l, double read_timeout_s, double write_timeout_s)
      : fd_(fd),
        limits_(l),
        read_timeout_(seconds(read_timeout_s)),
        write_timeout_(seconds(write_timeout_s)) {}

  // Waits up to `s` seconds for a request's first byte, giving up early once `stopped`.
  bool wait_for_request(double s, const std::function<bool()>& stopped) {
    if (off_ < len_) return true;  // a pipelined request already read
    const auto until = Clock::now() + seconds(s);
    while (!stopped()) {
      const auto slice = std::min(until, Clock::now() + std::chrono::milliseconds(50));
      const int r = poll_until(fd_, POLLIN, slice);
      if (r != 0) return r > 0;
      if (Clock::now() >= until) return false;
    }
    return false;
  }
  void begin_request() {
    head_ = true;
    head_bytes_ = 0;
    deadline_ = Clock::now() + seconds(limits_.head_timeout_s);
  }
  void head_done() {
    if (!head_) return;
    head_ = false;
    deadline_ = Clock::now() + seconds(limits_.body_timeout_s);
  }
  ReadLimit limit() const { return limit_; }

  bool is_readable() const override {
    return off_ < len_ || poll_until(fd_, POLLIN, Clock::now() + read_timeout_) > 0;
  }
  bool is_writable() const override {
    return poll_until(fd_, POLLOUT, Clock::now() + write_timeout_) > 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    if (limit_ != ReadLimit::kNone) return stop_reading();
    if (off_ == len_) {
      const auto now = Clock::now();
      if (now >= deadline_) return hit(head_ ? ReadLimit::kHeadTimeout : ReadLimit::kBodyTimeout);
      const bool deadline_first = deadline_ < now + read_timeout_;
      const int r = poll_until(fd_, POLLIN, deadline_first ? deadline_ : now + read_timeout_);
      if (r < 0) return -1;
      if (r == 0)  // the deadline, or cpp-httplib's per-read timeout (an error to it)
        return deadline_first ? hit(head_ ? ReadLimit::kHeadTimeout : ReadLimit::kBodyTimeout) : -1;
      ssize_t n;
      do n = recv(fd_, buf_.data(), buf_.size(), 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      off_ = 0;
      len_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, len_ - off_);
    if (head_) {
      if (head_bytes_ + n > limits_.max_head_bytes) return hit(ReadLimit::kHeadTooLarge);
      head_bytes_ += n;
    }
    std::memcpy(ptr, buf_.data() + off_, n);
    off_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = send(fd_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    socket_address(fd_, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    socket_address(fd_, false, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  // In the head a limit reads as the end of the stream, so cpp-httplib answers what it has
  // (a 400, which the error handler turns into the limit's status) instead of closing
  // silently; in the body an error, since a body without a length ends at the end of stream.
  ssize_t stop_reading() const { return head_ ? 0 : -1; }
  ssize_t hit(ReadLimit l) {
    limit_ = l;
    return stop_reading();
  }

  int fd_;
  HttpLimits limits_;
  Clock::duration read_timeout_, write_timeout_;
  std::array<char, 4096> buf_{};
  size_t off_ = 0, len_ = 0;
  bool head_ = true;
  size_t head_bytes_ = 0;
  Clock::time_point deadline_ = Clock::time_point::max();
  ReadLimit limit_ = ReadLimit::kNone;
};

thread_local DeadlineStream* t_stream = nullptr;

}  // namespace

void HttpServer::head_done() {
  if (t_stream) t_stream->head_done();
}

ReadLimit HttpServer::read_limit() { return t_stream ? t_stream->limit() : ReadLimit::kNone; }

int HttpServer::current_socket() { return t_stream ? t_stream->socket() : -1; }

bool HttpServer::set_backlog(int n) {
  const socket_t s = svr_sock_;
  return s != INVALID_SOCKET && ::listen(s, n) == 0;
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  DeadlineStream strm(sock, limits_,
                      static_cast<double>(read_timeout_sec_) + read_timeout_usec_ / 1e6,
                      static_cast<double>(write_timeout_sec_) + write_timeout_usec_ / 1e6);
  t_stream = &strm;
  const auto stopped = [this] { return svr_sock_ == INVALID_SOCKET; };
  bool ret = false;
  // A new connection's first byte is due within the head's time too; later requests on it
  // within the keep-alive time.
  double wait = std::min(static_cast<double>(keep_alive_timeout_sec_), limits_.head_timeout_s);
  for (size_t left = keep_alive_max_count_; left > 0 && !stopped(); --left) {
    if (!strm.wait_for_request(wait, stopped)) break;
    strm.begin_request();
    bool closed = false;
    ret = process_request(strm, left == 1, closed, {});
    if (!ret || closed || strm.limit() != ReadLimit::kNone) break;
    wait = static_cast<double>(keep_alive_timeout_sec_);
  }
  t_stream = nullptr;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

}  // namespace tq::serve
