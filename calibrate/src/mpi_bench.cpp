// `moesim calibrate net --mpi`: MPI ping-pong and collective timings (mpi_bench.hpp).
//
// Every rank takes the same decisions in the same order: rank 0 chooses how many repeats a size gets from a
// pilot measurement and broadcasts the count, so no rank waits on a message that will never come.

#include "moesim/calibrate/mpi_bench.hpp"

#include <mpi.h>

#include <algorithm>
#include <boost/mpi/communicator.hpp>
#include <boost/mpi/environment.hpp>
#include <cmath>

#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"

namespace moesim::calibrate {

namespace {

constexpr int kTagPing = 1;
constexpr int kTagPong = 2;

int count_of(std::uint64_t bytes) { return static_cast<int>(bytes); }

/// Repeats for a size whose pilot took `pilot_s`: enough to fill the time budget, within [min, max].
int repeats_for(double pilot_s, const PingPongOptions& o) {
  const double want = pilot_s > 0 ? o.time_per_size_s / pilot_s : static_cast<double>(o.max_repeats);
  const double lo = static_cast<double>(std::max<std::size_t>(o.min_repeats, 1));
  const double hi = static_cast<double>(std::max(o.max_repeats, o.min_repeats));
  return static_cast<int>(std::clamp(std::floor(want), lo, hi));
}

nlohmann::json stats_json(const std::vector<double>& v) {
  const SampleStats s = sample_stats(v);
  return {{"min", s.min}, {"p10", s.p10}, {"median", s.median}, {"p90", s.p90},
          {"p99", s.p99}, {"max", s.max}, {"mean", s.mean}};
}

/// Rank 0 <-> rank 1 ping-pong of `bytes`; the other ranks skip it. Returns rank 0's RTTs.
std::vector<double> mpi_pingpong(MPI_Comm comm, int rank, std::uint64_t bytes, std::vector<char>& buf,
                                 const PingPongOptions& o) {
  std::vector<double> rtts;
  if (rank > 1) return rtts;
  const int n = count_of(bytes);
  const int warmup = static_cast<int>(std::max<std::size_t>(o.warmup, 1));
  const auto one = [&](bool timed) {
    if (rank == 0) {
      const double t0 = MPI_Wtime();
      MPI_Send(buf.data(), n, MPI_BYTE, 1, kTagPing, comm);
      MPI_Recv(buf.data(), n, MPI_BYTE, 1, kTagPong, comm, MPI_STATUS_IGNORE);
      const double rtt = MPI_Wtime() - t0;
      if (timed) rtts.push_back(rtt);
      return rtt;
    }
    MPI_Recv(buf.data(), n, MPI_BYTE, 0, kTagPing, comm, MPI_STATUS_IGNORE);
    MPI_Send(buf.data(), n, MPI_BYTE, 0, kTagPong, comm);
    return 0.0;
  };
  double pilot = 0;
  for (int i = 0; i < warmup; ++i) pilot = one(false);
  int reps = rank == 0 ? repeats_for(pilot, o) : 0;
  if (rank == 0) {
    MPI_Send(&reps, 1, MPI_INT, 1, kTagPing, comm);
  } else {
    MPI_Recv(&reps, 1, MPI_INT, 0, kTagPing, comm, MPI_STATUS_IGNORE);
  }
  for (int i = 0; i < reps; ++i) one(true);
  return rtts;
}

/// Times `op` on every rank: per repeat a barrier, the op, and the slowest rank's time (rank 0 keeps it).
template <class Op>
std::vector<double> time_collective(MPI_Comm comm, int rank, const PingPongOptions& o, Op op) {
  const auto once = [&] {
    MPI_Barrier(comm);
    const double t0 = MPI_Wtime();
    op();
    const double mine = MPI_Wtime() - t0;
    double slowest = 0;
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, comm);
    return slowest;
  };
  double pilot = 0;
  for (std::size_t i = 0; i < std::max<std::size_t>(o.warmup, 1); ++i) pilot = once();
  int reps = rank == 0 ? repeats_for(pilot, o) : 0;
  MPI_Bcast(&reps, 1, MPI_INT, 0, comm);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const double t = once();
    if (rank == 0) times.push_back(t);
  }
  return times;
}

}  // namespace

std::optional<NetResult> run_mpi_bench(const PingPongOptions& o, Progress& progress) {
  // abort_on_exception = false: a UserError leaving this function finalises MPI normally instead of
  // calling MPI_Abort, so `moesim` can print its one line and exit with code 2.
  boost::mpi::environment env(false);
  boost::mpi::communicator world;
  const int rank = world.rank();
  const int ranks = world.size();
  if (ranks < 2) {
    throw UserError("--mpi needs at least 2 ranks and this run has " + std::to_string(ranks) +
                    ": run under mpirun -np 2 (or more), e.g. `mpirun -np 2 moesim calibrate net --mpi`");
  }
  if (o.sizes.empty()) throw UserError("--sizes: no message sizes to measure; give e.g. --sizes pow4");
  const std::uint64_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());
  if (largest > (1ull << 30)) throw UserError("--sizes: at most 1 GiB per message under --mpi");
  MPI_Comm comm = world;
  std::vector<std::uint64_t> sizes = o.sizes;
  std::sort(sizes.begin(), sizes.end());
  Progress quiet = Progress::quiet();
  Progress& p = rank == 0 ? progress : quiet;

  const double t0 = MPI_Wtime();
  NetResult r;
  r.transport = "mpi";
  r.peer = "rank 0 <-> rank 1";
  r.ranks = ranks;
  std::vector<char> buf(static_cast<std::size_t>(largest), 1);
  const double steps = static_cast<double>(3 * sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    p.update(static_cast<double>(i) / steps, "net --mpi: ping-pong " + size_label(sizes[i]));
    auto rtts = mpi_pingpong(comm, rank, sizes[i], buf, o);
    if (rank == 0) r.sizes.push_back(SizeSamples{sizes[i], std::move(rtts), {}});
  }

  nlohmann::json allreduce = nlohmann::json::array();
  nlohmann::json alltoall = nlohmann::json::array();
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const std::uint64_t bytes = sizes[i];
    p.update(static_cast<double>(sizes.size() + 2 * i) / steps, "net --mpi: all-reduce " + size_label(bytes));
    // MPI_Allreduce of floats: sizes below one float are skipped.
    if (bytes >= sizeof(float)) {
      const auto count = static_cast<std::size_t>(bytes / sizeof(float));
      std::vector<float> in(count, 1.0f), out(count, 0.0f);
      const auto t = time_collective(comm, rank, o, [&] {
        MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm);
      });
      if (rank == 0) {
        allreduce.push_back({{"bytes", count * sizeof(float)}, {"repeats", t.size()}, {"time_s", stats_json(t)}});
      }
    }
    p.update(static_cast<double>(sizes.size() + 2 * i + 1) / steps, "net --mpi: all-to-all " + size_label(bytes));
    // MPI_Alltoall: each rank sends bytes / ranks to every rank (itself included).
    const std::uint64_t block = bytes / static_cast<std::uint64_t>(ranks);
    if (block >= 1) {
      const std::size_t total = static_cast<std::size_t>(block) * static_cast<std::size_t>(ranks);
      std::vector<char> in(total, 2), out(total, 0);
      const auto t = time_collective(comm, rank, o, [&] {
        MPI_Alltoall(in.data(), count_of(block), MPI_BYTE, out.data(), count_of(block), MPI_BYTE, comm);
      });
      if (rank == 0) alltoall.push_back({{"bytes", total}, {"repeats", t.size()}, {"time_s", stats_json(t)}});
    }
  }
  world.barrier();
  if (rank != 0) return std::nullopt;
  r.collectives = {{"allreduce_f32_sum", std::move(allreduce)}, {"alltoall", std::move(alltoall)}};
  r.fit = fit_hockney(r.sizes);
  r.wall_s = MPI_Wtime() - t0;
  p.done("net --mpi: " + std::to_string(sizes.size()) + " sizes, " + std::to_string(ranks) + " ranks");
  return r;
}

}  // namespace moesim::calibrate
