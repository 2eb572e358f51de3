#include "base/comm.h"

#include <cstdlib>
#include <memory>

namespace tq {

#ifdef TQ_HAVE_MPI
// comm_mpi.cc (built only when CMake found MPI).
Result<std::unique_ptr<Comm>> open_mpi_world();
void close_mpi_world();
#endif

namespace {

class LocalComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status send(int dest, int, std::span<const uint8_t>) override {
    return err("send to rank {}: a single-process run has only rank 0", dest);
  }
  Result<int> recv(int source, int, std::vector<uint8_t>*) override {
    return err("receive from rank {}: a single-process run has only rank 0", source);
  }
  Result<int> try_recv(int source, int tag, std::vector<uint8_t>* bytes) override {
    return recv(source, tag, bytes);
  }
  Status broadcast(int, std::vector<uint8_t>*) override { return ok_status(); }
  Status barrier() override { return ok_status(); }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }
};

std::unique_ptr<Comm>& world_ptr() {
  static std::unique_ptr<Comm> w = std::make_unique<LocalComm>();
  return w;
}

bool mpi_started = false;

// Set by Open MPI's launcher (mpirun / orterun, or a PMIx server such as srun's).
bool under_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

}  // namespace

Comm& world() { return *world_ptr(); }

bool world_has_mpi() {
#ifdef TQ_HAVE_MPI
  return true;
#else
  return false;
#endif
}

Status init_world() {
  if (!under_mpirun() || mpi_started) return ok_status();
#ifdef TQ_HAVE_MPI
  TQ_TRY(world_ptr(), open_mpi_world());
  mpi_started = true;
  return ok_status();
#else
  const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (n != nullptr && std::atoi(n) == 1) return ok_status();  // mpirun -np 1: one rank anyway
  return err(
      "launched by mpirun, but this tq was built without MPI (install libopenmpi-dev and "
      "rebuild)");
#endif
}

void finalize_world() {
#ifdef TQ_HAVE_MPI
  if (mpi_started) {
    world_ptr() = std::make_unique<LocalComm>();
    close_mpi_world();
    mpi_started = false;
  }
#endif
}

RankRange rank_range(int64_t n, int rank, int size) {
  return {n * rank / size, n * (rank + 1) / size};
}

int range_owner(int64_t n, int64_t i, int size) {
  for (int r = 0; r < size; ++r)
    if (i < rank_range(n, r, size).end) return r;
  return size - 1;
}

}  // namespace tq
