// The Comm of an mpirun job, over Open MPI. Compiled only when CMake finds MPI.
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <memory>

#include "base/comm.h"

namespace tq {

namespace {

Error mpi_err(const char* what, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return err("MPI {}: {}", what, std::string(text, static_cast<size_t>(len)));
}

class MpiComm final : public Comm {
 public:
  MpiComm(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status send(int dest, int tag, std::span<const uint8_t> bytes) override {
    if (bytes.size() > static_cast<size_t>(INT_MAX))
      return err("MPI send: a message of {} bytes is over the 2 GiB limit of one message",
                 bytes.size());
    const int rc =
        MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, dest, tag, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_err("send", rc);
    return ok_status();
  }

  Result<int> recv(int source, int tag, std::vector<uint8_t>* bytes) override {
    // A matched probe: the message probed is the one received, even with several threads.
    MPI_Message msg;
    MPI_Status st;
    int rc =
        MPI_Mprobe(source == kAnySource ? MPI_ANY_SOURCE : source, tag, MPI_COMM_WORLD, &msg, &st);
    if (rc != MPI_SUCCESS) return mpi_err("probe", rc);
    return take(msg, st, bytes);
  }

  Result<int> try_recv(int source, int tag, std::vector<uint8_t>* bytes) override {
    MPI_Message msg;
    MPI_Status st;
    int flag = 0;
    int rc = MPI_Improbe(source == kAnySource ? MPI_ANY_SOURCE : source, tag, MPI_COMM_WORLD, &flag,
                         &msg, &st);
    if (rc != MPI_SUCCESS) return mpi_err("probe", rc);
    if (!flag) return -1;
    return take(msg, st, bytes);
  }

  // Receives a probed message; returns its source rank.
  static Result<int> take(MPI_Message& msg, const MPI_Status& st, std::vector<uint8_t>* bytes) {
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    bytes->resize(static_cast<size_t>(count));
    const int rc = MPI_Mrecv(bytes->data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_err("receive", rc);
    return st.MPI_SOURCE;
  }

  Status broadcast(int root, std::vector<uint8_t>* bytes) override {
    uint64_t n = bytes->size();
    int rc = MPI_Bcast(&n, 1, MPI_UINT64_T, root, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_err("broadcast", rc);
    bytes->resize(n);
    for (uint64_t off = 0; off < n;) {
      const int piece = static_cast<int>(std::min<uint64_t>(n - off, uint64_t{1} << 30));
      rc = MPI_Bcast(bytes->data() + off, piece, MPI_BYTE, root, MPI_COMM_WORLD);
      if (rc != MPI_SUCCESS) return mpi_err("broadcast", rc);
      off += static_cast<uint64_t>(piece);
    }
    return ok_status();
  }

  Status barrier() override {
    const int rc = MPI_Barrier(MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_err("barrier", rc);
    return ok_status();
  }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  int rank_, size_;
};

}  // namespace

Result<std::unique_ptr<Comm>> open_mpi_world() {
  int provided = 0;
  int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  if (rc != MPI_SUCCESS) return mpi_err("init", rc);
  // Errors come back as values; a rank that dies makes mpirun end the whole job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (provided < MPI_THREAD_MULTIPLE)
    return err("MPI: this Open MPI does not support MPI_THREAD_MULTIPLE (level {})", provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return std::unique_ptr<Comm>(new MpiComm(rank, size));
}

void close_mpi_world() { MPI_Finalize(); }

}  // namespace tq
