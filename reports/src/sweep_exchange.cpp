// Running a stage over the points: threads within a process, and the exchange of each point's results
// between MPI ranks (SweepComm), serialised so that a gathered result equals a local one bit for bit.
#include <algorithm>

#include "moesim/model/error.hpp"
#include "moesim/model/parallel.hpp"
#include "moesim/reports/sweep.hpp"
#include "sweep_detail.hpp"

namespace moesim::reports {

namespace {

/// The per-point fields a stage computes, as JSON (doubles round-trip exactly through nlohmann's
/// shortest representation, so a gathered result equals a local one bit for bit).
nlohmann::json stage_blob(const PointResult& r) {
  return {{"i", r.point.index},
          {"status", r.status},
          {"fits", r.fits},
          {"mem", r.memory_needed},
          {"avail", r.memory_available},
          {"dmem", r.device_memory_needed},
          {"dusable", r.device_memory_usable},
          {"whynot", r.why_not_fit},
          {"atps", r.analytic_tokens_per_s},
          {"cn", r.capital.nodes.base()},
          {"cc", r.capital.nics.base()},
          {"cs", r.capital.switches.base()},
          {"sc", r.capital.switch_count},
          {"notes", r.capital.notes},
          {"sim", r.simulated},
          {"inst", r.instrument},
          {"stps", r.sim_tokens_per_s},
          {"moe", r.split_moe},
          {"comm", r.split_comm},
          {"misc", r.split_misc},
          {"otps", r.output_tokens_per_s},
          {"utps", r.per_user_tokens_per_s},
          {"t50", r.ttft_p50},
          {"t99", r.ttft_p99},
          {"i50", r.itl_p50},
          {"i99", r.itl_p99},
          {"good", r.goodput}};
}

void apply_blob(const nlohmann::json& j, PointResult& r) {
  r.status = j.at("status").get<std::string>();
  r.fits = j.at("fits").get<bool>();
  r.memory_needed = j.at("mem").get<double>();
  r.memory_available = j.at("avail").get<double>();
  r.device_memory_needed = j.at("dmem").get<double>();
  r.device_memory_usable = j.at("dusable").get<double>();
  r.why_not_fit = j.at("whynot").get<std::string>();
  r.analytic_tokens_per_s = j.at("atps").get<double>();
  r.capital.nodes = units::usd(j.at("cn").get<double>());
  r.capital.nics = units::usd(j.at("cc").get<double>());
  r.capital.switches = units::usd(j.at("cs").get<double>());
  r.capital.switch_count = j.at("sc").get<std::int64_t>();
  r.capital.notes = j.at("notes").get<std::vector<std::string>>();
  r.simulated = j.at("sim").get<bool>();
  r.instrument = j.at("inst").get<std::string>();
  r.sim_tokens_per_s = j.at("stps").get<double>();
  r.split_moe = j.at("moe").get<double>();
  r.split_comm = j.at("comm").get<double>();
  r.split_misc = j.at("misc").get<double>();
  r.output_tokens_per_s = j.at("otps").get<double>();
  r.per_user_tokens_per_s = j.at("utps").get<double>();
  r.ttft_p50 = j.at("t50").get<double>();
  r.ttft_p99 = j.at("t99").get<double>();
  r.itl_p50 = j.at("i50").get<double>();
  r.itl_p99 = j.at("i99").get<double>();
  r.goodput = j.at("good").get<double>();
}

}  // namespace

namespace sweep_detail {

void run_stage(const char* stage, const std::vector<std::int64_t>& todo, std::vector<PointResult>& points,
               const SweepOptions& o, const SweepComm& comm, const std::function<void(PointResult&)>& work) {
  std::vector<std::int64_t> mine;
  for (std::size_t k = 0; k < todo.size(); ++k)
    if (static_cast<int>(k % static_cast<std::size_t>(comm.size)) == comm.rank) mine.push_back(todo[k]);
  std::size_t finished = 0;
  model::parallel_for(
      mine.size(), o.threads, [&](std::size_t k) { work(points[static_cast<std::size_t>(mine[k])]); },
      [&](std::size_t d) {
        finished = d;
        if (o.progress) o.progress(stage, d, mine.size());
      },
      [&] { return o.cancelled && o.cancelled(); });
  if (o.cancelled && o.cancelled())
    throw UserError(std::string("interrupted during the ") + stage + " stage after " + std::to_string(finished) +
                    " of " + std::to_string(mine.size()) + " points; nothing was written");
  if (comm.size > 1) {
    nlohmann::json local = nlohmann::json::array();
    for (auto i : mine) local.push_back(stage_blob(points[static_cast<std::size_t>(i)]));
    const auto blobs = comm.allgather(local.dump());
    for (const auto& b : blobs)
      for (const auto& j : nlohmann::json::parse(b)) apply_blob(j, points.at(j.at("i").get<std::size_t>()));
  }
}

}  // namespace sweep_detail

}  // namespace moesim::reports
