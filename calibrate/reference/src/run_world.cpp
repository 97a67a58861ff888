// World: the MPI environment of the reference run (run.hpp), or a single process when not under mpirun.

#include <algorithm>
#include <boost/mpi/collectives.hpp>
#include <boost/mpi/communicator.hpp>
#include <boost/mpi/environment.hpp>
#include <boost/serialization/string.hpp>
#include <boost/serialization/vector.hpp>
#include <cstdlib>

#include "moesim/model/error.hpp"
#include "moesim/reference/run.hpp"

namespace moesim::reference {

namespace mpi = boost::mpi;

World::World() {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr && std::getenv("PMIX_RANK") == nullptr) return;
  // abort_on_exception = false: a UserError unwinding through here is reported by main(), not MPI_Abort.
  auto* env = new mpi::environment(mpi::threading::funneled, false);
  env_ = env;
  mpi::communicator world;
  rank_ = world.rank();
  size_ = world.size();
  std::vector<std::string> names;
  mpi::all_gather(world, mpi::environment::processor_name(), names);
  ranks_on_host_ = static_cast<int>(std::count(names.begin(), names.end(), names[static_cast<std::size_t>(rank_)]));
}

World::~World() { delete static_cast<mpi::environment*>(env_); }

void World::agree(const std::string& error) const {
  if (!mpi()) {
    if (!error.empty()) throw UserError(error);
    return;
  }
  mpi::communicator world;
  std::vector<std::string> errors;
  mpi::all_gather(world, error, errors);
  if (!error.empty()) throw UserError(error);
  for (std::size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) throw UserError("rank " + std::to_string(r) + " failed: " + errors[r]);
}

std::vector<std::string> World::all_gather(const std::string& mine) const {
  if (!mpi()) return {mine};
  mpi::communicator world;
  std::vector<std::string> all;
  mpi::all_gather(world, mine, all);
  return all;
}

}  // namespace moesim::reference
