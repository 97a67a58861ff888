#pragma once
// The reference decoder run expert-parallel over MPI ranks (issue 5, parts 3 and 4).
//
// Each rank is one node of the simulator's cluster: it holds the experts its placement gives it (the
// placements of sim/placement.hpp, by the same names) and computes the experts the same dispatch rule
// (the i-th chosen expert of a group goes to member i mod r) assigns to it. Seed 000's two designs:
//  - decentralised (§4, Fig. 7): every rank runs attention and the router on the same inputs (replicated,
//    so every rank knows the whole routing), computes its experts, and one MPI all-reduce per MoE layer
//    exchanges the expert outputs. The all-reduce sums a [tokens × top_k × h] buffer in which each
//    (token, slot) is written by exactly the rank that computed it and is zero elsewhere, so the sum is
//    exact and the output is bit-identical to a single process's, whatever the rank count;
//  - centralised (§3, Fig. 3): rank 0 runs attention and the router, sends every other rank the layer's
//    routing and inputs, computes its own experts, and gathers their outputs: two exchanges per layer.
// The outputs are combined in router order (y = Σ_i w_i · expert_i(x)), on every rank or on rank 0.
// Balancing (decode steps only, as the simulator replays decode tokens): none; busy loading, every local
// expert every layer (P-L_B, §4.2); or LRU fillers, up to the layer's busiest rank's routed count with
// the least recently used local experts (P-L_R-D, §4.2). Fillers' outputs are discarded: they cost time,
// never change a result.
//
// Measured per step (the prompt's prefill as one step, then each decode token) and decoder layer, on
// every rank: attention (norm, projections, RoPE, scores, KV cache), router, experts (fillers included),
// exchange (time inside MPI), combine; rank 0 gathers the ranks' figures at the end and splits its
// exchange time into waiting for the slowest rank and the transfer itself (see LayerTiming::wait).
// The routing of every token becomes the simulator's routing-trace format.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "moesim/reference/decoder.hpp"
#include "moesim/sim/decode.hpp"
#include "moesim/sim/placement.hpp"
#include "moesim/sim/trace.hpp"

namespace moesim::reference {

/// The MPI world this process runs in: a single process (no MPI initialised) unless launched by mpirun.
class World {
 public:
  /// Initialises MPI (Boost.MPI, funneled threading) when this process was started by mpirun (Open MPI's
  /// OMPI_COMM_WORLD_SIZE or PMIx's PMIX_RANK in the environment); otherwise a world of one.
  World();
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;
  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] bool mpi() const { return env_ != nullptr; }
  /// Ranks on this host (the same processor name), for sharing its cores.
  [[nodiscard]] int ranks_on_host() const { return ranks_on_host_; }
  /// Raises on every rank when any rank failed: `error` is this rank's message or empty. Ranks whose
  /// own step succeeded throw UserError naming the failed rank and its message.
  void agree(const std::string& error) const;
  /// Every rank's `mine`, in rank order (just `mine` without MPI).
  [[nodiscard]] std::vector<std::string> all_gather(const std::string& mine) const;

 private:
  void* env_ = nullptr;  ///< boost::mpi::environment*
  int rank_ = 0;
  int size_ = 1;
  int ranks_on_host_ = 1;
};

struct RunOptions {
  std::filesystem::path checkpoint;
  std::vector<std::int32_t> prompt;  ///< token ids of the prompt; empty: drawn as below
  std::int64_t prompt_length = 0;    ///< without `prompt`: this many ids drawn uniformly from the vocabulary
  std::uint64_t prompt_seed = 1;     ///< ... with this seed (std::mt19937_64)
  std::int64_t new_tokens = 16;      ///< tokens to generate (the first comes from the prefill)
  std::string placement = "contiguous";
  std::int64_t groups = 2;
  std::string placement_file;
  sim::AttentionMode attention = sim::AttentionMode::Decentralised;
  sim::Balancing balancing = sim::Balancing::LruFill;
  int threads = 0;       ///< OpenBLAS threads per rank; 0: this host's cores / ranks on this host
  bool progress = true;  ///< progress lines on stderr (rank 0)
};

/// One decoder layer of one step, as one rank measured it (seconds).
struct LayerTiming {
  double attention = 0;
  double router = 0;
  double experts = 0;
  double exchange = 0;  ///< inside MPI
  /// Of `exchange`, rank 0's estimated wait for the slowest rank: max over ranks of the work before the
  /// exchange (attention + router + experts when decentralised, experts when centralised) minus its own,
  /// clamped to [0, exchange]. The rest of the exchange is the transfer.
  double wait = 0;
  double combine = 0;
  std::int32_t routed = 0;   ///< expert computations the router asked of this rank (summed over tokens)
  std::int32_t fillers = 0;  ///< computations balancing added
};

/// One step: the prefill (all prompt tokens at once) or one decode token.
struct StepTiming {
  bool prefill = false;
  std::int64_t position = 0;  ///< first position processed
  std::int64_t tokens = 0;    ///< positions processed
  double seconds = 0;         ///< wall time of the step on rank 0
  double embed = 0;           ///< embedding look-up
  double head = 0;            ///< final norm, LM head, arg-max
  std::vector<LayerTiming> layers;
};

struct RunResult {
  DecoderShape shape;
  sim::Placement placement;
  sim::AttentionMode attention{};
  sim::Balancing balancing{};
  int ranks = 1;
  int ranks_on_host = 1;
  int threads = 1;
  std::vector<std::int32_t> prompt;
  std::vector<std::int32_t> generated;      ///< greedy tokens, the first from the prefill
  std::vector<float> logits;                ///< the last step's logits (vocab)
  sim::RoutingTrace trace;                  ///< every position's routing (request 0, position = token index)
  std::vector<StepTiming> steps;            ///< rank 0's view
  std::vector<std::uint64_t> weight_bytes;  ///< f32 weights held, per rank
  std::vector<double> peak_rss_bytes;       ///< per rank (getrusage)
  double load_seconds = 0;
  std::vector<std::string> notes;

  [[nodiscard]] double prefill_seconds() const;
  /// Decode steps (every step after the prefill).
  [[nodiscard]] std::int64_t decode_steps() const;
  [[nodiscard]] double decode_seconds() const;
};

/// Loads this rank's share of the checkpoint and generates. Every rank calls it; rank 0's result holds
/// everything (other ranks' results hold their own timings only). UserError on every rank when any rank
/// fails (bad checkpoint, a prompt id outside the vocabulary, a placement the rank count cannot serve).
RunResult run_reference(const World& world, const RunOptions& options);

/// The trace of the decode steps only (what the simulator replays), positions kept.
sim::RoutingTrace decode_trace(const RunResult& r);

/// Seed 000 Table 3's split of the decode steps, seconds per token, rank 0's view: misc (attention,
/// router, combine, embedding, LM head), moe (experts, fillers included), comm (exchange), of which wait.
struct MeasuredSplit {
  double time = 0, misc = 0, moe = 0, comm = 0, wait = 0;
  /// Rank 0's expert weights read per second of expert time: (routed + fillers) × 3·h·I × 4 B over the
  /// decode steps' expert time (the SwiGLU GEMVs' achieved bandwidth; activations are negligible).
  double expert_bandwidth = 0;
};
MeasuredSplit decode_split(const RunResult& r);

/// Timing file: one CSV row per step and layer (plus a row per step for embedding and LM head), units in
/// the header.
void write_timing_csv(const RunResult& r, std::ostream& out);
/// Final logits as JSON {"tokens": [...], "logits": [...]} with 9 significant digits (exact for f32).
nlohmann::json logits_json(const RunResult& r);
/// The run summarised: configuration, tokens/s for prefill and decode, the split, memory per rank.
nlohmann::json run_summary_json(const RunResult& r);
void print_run_summary(const RunResult& r, std::ostream& out);

}  // namespace moesim::reference
