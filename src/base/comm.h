// The ranks of a job: one process (a single rank, no MPI needed) or the processes `mpirun`
// started (Open MPI, when the build found it). Work that spreads over ranks (sensitivity
// modules, evaluation windows, GPTQ calibration rows) talks only through this interface;
// every reduction is done on rank 0 in a fixed order, so results do not depend on the rank
// count. Messages are bytes; the helpers below move vectors of plain values.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "base/result.h"

namespace tq {

inline constexpr int kAnySource = -1;

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Point to point; safe from several threads at once (MPI_THREAD_MULTIPLE).
  virtual Status send(int dest, int tag, std::span<const uint8_t> bytes) = 0;
  // The next message with `tag` from `source` (or kAnySource); returns the sender's rank.
  virtual Result<int> recv(int source, int tag, std::vector<uint8_t>* bytes) = 0;
  // As recv, but returns -1 at once when no such message is waiting (a coordinator polls with
  // it and sleeps between looks: MPI's blocking receive spins a core).
  virtual Result<int> try_recv(int source, int tag, std::vector<uint8_t>* bytes) = 0;
  // Root's bytes to every rank (others' vectors are resized).
  virtual Status broadcast(int root, std::vector<uint8_t>* bytes) = 0;
  virtual Status barrier() = 0;
  // Ends every rank of the job at once (after an error on one of them, so none waits forever).
  [[noreturn]] virtual void abort(int code) = 0;
};

// The process's communicator: set up by init_world(), a single rank before that.
Comm& world();

// Joins the job mpirun started (Open MPI sets OMPI_COMM_WORLD_SIZE / PMIX_RANK), else stays a
// single rank without touching MPI. An error when launched by mpirun from a build without MPI.
Status init_world();
// MPI_Finalize when init_world() started MPI; otherwise nothing.
void finalize_world();
// True when this build can join an mpirun job.
bool world_has_mpi();

// Plain-value vectors as messages.
template <typename T>
Status send_values(Comm& c, int dest, int tag, std::span<const T> v) {
  static_assert(std::is_trivially_copyable_v<T>);
  return c.send(dest, tag, {reinterpret_cast<const uint8_t*>(v.data()), v.size_bytes()});
}

template <typename T>
Result<int> recv_values(Comm& c, int source, int tag, std::vector<T>* v) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::vector<uint8_t> bytes;
  TQ_TRY(int from, c.recv(source, tag, &bytes));
  if (bytes.size() % sizeof(T) != 0)
    return err("rank {}: message of {} bytes is not a whole number of {}-byte values", from,
               bytes.size(), sizeof(T));
  v->resize(bytes.size() / sizeof(T));
  if (!bytes.empty()) std::memcpy(v->data(), bytes.data(), bytes.size());
  return from;
}

template <typename T>
Status broadcast_values(Comm& c, int root, std::vector<T>* v) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::vector<uint8_t> bytes;
  if (c.rank() == root) {
    bytes.resize(v->size() * sizeof(T));
    if (!bytes.empty()) std::memcpy(bytes.data(), v->data(), bytes.size());
  }
  TQ_CHECK_OK(c.broadcast(root, &bytes));
  if (c.rank() != root) {
    if (bytes.size() % sizeof(T) != 0)
      return err("broadcast: {} bytes are not whole values", bytes.size());
    v->resize(bytes.size() / sizeof(T));
    if (!bytes.empty()) std::memcpy(v->data(), bytes.data(), bytes.size());
  }
  return ok_status();
}

// Vectors of any size (a Hessian can pass MPI's 2 GiB per message): sent in pieces of at most
// 1 GiB that the receiver, knowing the total from the shape, collects in order.
inline constexpr size_t kMaxPieceBytes = size_t{1} << 30;

template <typename T>
Status send_large(Comm& c, int dest, int tag, std::span<const T> v) {
  static_assert(std::is_trivially_copyable_v<T>);
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  const size_t n = v.size_bytes();
  size_t off = 0;
  do {
    const size_t piece = std::min(n - off, kMaxPieceBytes);
    TQ_CHECK_OK(c.send(dest, tag, {p + off, piece}));
    off += piece;
  } while (off < n);
  return ok_status();
}

template <typename T>
Status recv_large(Comm& c, int source, int tag, std::span<T> out) {
  static_assert(std::is_trivially_copyable_v<T>);
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  const size_t n = out.size_bytes();
  size_t off = 0;
  std::vector<uint8_t> piece;
  do {
    TQ_CHECK_OK(c.recv(source, tag, &piece));
    if (piece.size() > n - off)
      return err("rank {}: {} bytes received where {} were left of {}", source, piece.size(),
                 n - off, n);
    if (!piece.empty()) std::memcpy(p + off, piece.data(), piece.size());
    off += piece.size();
  } while (off < n);
  return ok_status();
}

// Items [0, n) split over ranks by contiguous ranges: rank r owns [begin, end).
struct RankRange {
  int64_t begin = 0, end = 0;
};
RankRange rank_range(int64_t n, int rank, int size);
// Which rank owns item i under rank_range.
int range_owner(int64_t n, int64_t i, int size);

}  // namespace tq
