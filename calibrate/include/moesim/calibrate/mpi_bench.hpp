#pragma once
// `moesim calibrate net --mpi`, run under `mpirun -np N`: the ping-pong of pingpong.hpp between rank 0 and
// rank 1 over MPI point-to-point messages, then the collectives the simulator models, timed across all
// ranks: MPI_Allreduce (a float sum, the tensor-parallel all-reduce) and MPI_Alltoall (the expert-parallel
// token exchange). Boost.MPI's environment is created here only, so no other command initialises MPI.

#include <optional>

#include "moesim/calibrate/pingpong.hpp"

namespace moesim::calibrate {

/// Runs the MPI measurements on every rank (all ranks must call it). Rank 0 gets the result (transport
/// "mpi", the ping-pong sizes and fit, `collectives` = {"allreduce_f32_sum": [...], "alltoall": [...]},
/// each row {bytes, repeats, time_s: {min, p10, median, p90, p99, max, mean}}); the other ranks get nullopt
/// and print nothing. A collective's time per repeat is the slowest rank's, after a barrier (the OSU
/// micro-benchmarks' convention). All-reduce sizes are the float vector's bytes; all-to-all sizes are the
/// bytes each rank sends in total, split evenly over the ranks. UserError with fewer than 2 ranks.
/// `progress` is updated on rank 0 only.
std::optional<NetResult> run_mpi_bench(const PingPongOptions& options, Progress& progress);

}  // namespace moesim::calibrate
