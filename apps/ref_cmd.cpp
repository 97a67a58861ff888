// `moesim ref init|run` and `moesim validate`: the reference execution path (calibrate/reference/). This file
// parses arguments, calls the library and prints; under mpirun only rank 0 prints and writes files.

#include <boost/program_options.hpp>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "moesim/calibrate/progress.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/text.hpp"
#include "moesim/reference/checkpoint.hpp"
#include "moesim/reference/run.hpp"
#include "moesim/reference/validate.hpp"
#include "moesim/sim/decode.hpp"
#include "moesim/sim/placement.hpp"
#include "moesim/sim/trace_io.hpp"

namespace po = boost::program_options;

namespace moesim::apps {
namespace {

reference::DType dtype_by_name(const std::string& s) {
  if (s == "bf16" || s == "BF16") return reference::DType::BF16;
  if (s == "f16" || s == "fp16" || s == "F16") return reference::DType::F16;
  if (s == "f32" || s == "fp32" || s == "F32") return reference::DType::F32;
  throw UserError("--dtype " + s + ": write bf16, f16 or f32 (the safetensors dtypes the reader loads)");
}

int cmd_ref_init(const Args& args, std::ostream& out) {
  po::options_description desc("options");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("config", po::value<std::string>(), "a zoo id (e.g. tinymistral-6x248m, mixtral-8x7b) or a Mixtral-family config.json")
    ("out", po::value<std::string>(), "the checkpoint directory to create (must not hold a checkpoint)")
    ("seed", po::value<std::string>()->default_value("1"), "seed of the random weights")
    ("dtype", po::value<std::string>()->default_value("bf16"), "stored dtype: bf16, f16 or f32")
    ("max-shard-size", po::value<std::string>()->default_value("2GB"),
     "largest safetensors file; a bigger model is sharded with model.safetensors.index.json")
    ("quiet", "no progress on stderr");
  // clang-format on
  po::variables_map vm;
  if (!parse_options(args, desc, vm, out,
                     "usage: moesim ref init --config ID|config.json --out DIR [--seed S] [--dtype bf16]\n\n"
                     "Writes a random-weight checkpoint in Hugging Face's format (config.json + safetensors, "
                     "sharded like save_pretrained) so the reference decoder runs without downloads. Norm weights "
                     "are 1, every other weight uniform with standard deviation initializer_range (0.02 when the "
                     "config has none), seeded per tensor name.\n\nexample:\n"
                     "  moesim ref init --config tinymistral-6x248m --out /tmp/tinymistral")) {
    return 0;
  }
  if (!vm.count("config"))
    throw UserError("--config is required: a zoo id such as tinymistral-6x248m or a config.json");
  if (!vm.count("out")) throw UserError("--out is required: the directory to write the checkpoint into");
  auto config = model::load_model_config(vm["config"].as<std::string>());
  reference::InitOptions o;
  o.seed = parse_seed(vm["seed"].as<std::string>(), "--seed");
  o.dtype = dtype_by_name(vm["dtype"].as<std::string>());
  o.max_shard_bytes = parse_byte_size(vm["max-shard-size"].as<std::string>(), "--max-shard-size");
  if (config.is_object() && config.contains("initializer_range") && config["initializer_range"].is_number()) {
    o.init_std = config["initializer_range"].get<double>();
  }
  calibrate::Progress progress(vm.count("quiet") ? nullptr : &std::cerr, 1.0);
  const auto res = reference::write_random_checkpoint(
      config, vm["out"].as<std::string>(), o, [&](std::uint64_t done, std::uint64_t total) {
        progress.update(
            static_cast<double>(done) / static_cast<double>(total),
            "ref init: " + std::to_string(done / 1000000) + " / " + std::to_string(total / 1000000) + " MB");
      });
  progress.done("ref init: done");
  out << "wrote " << vm["out"].as<std::string>() << ": " << res.parameters << " parameters, " << res.bytes
      << " B of weights in " << res.files.size() << " files\n";
  for (const auto& f : res.files) out << "  " << f.string() << "\n";
  return 0;
}

/// A registry's names as a --help line lists them: "a, b or c".
template <class Registry>
std::string names_of(const Registry& registry) {
  std::vector<std::string> names;
  names.reserve(registry.size());
  for (const auto& x : registry) names.push_back(x.name);
  if (names.size() < 2) return text::join(names);
  const std::string last = names.back();
  names.pop_back();
  return text::join(names) + " or " + last;
}

/// Options shared by `ref run` and `validate`.
void add_run_options(po::options_description& desc) {
  const std::string strategy_help =
      names_of(sim::strategies()) + ": their attention placement and balancing (packing does not apply on a CPU)";
  const std::string attention_help = "override: " + names_of(sim::attention_modes());
  const std::string balancing_help = "override: " + names_of(sim::balancings());
  // clang-format off
  desc.add_options()
    ("checkpoint", po::value<std::string>(), "checkpoint directory (config.json + safetensors) or a .safetensors file")
    ("prompt", po::value<std::string>(), "prompt token ids, e.g. 1,2,3 (no tokenizer is needed)")
    ("prompt-length", po::value<std::int64_t>()->default_value(8),
     "without --prompt: this many token ids drawn uniformly from the vocabulary with --seed")
    ("seed", po::value<std::string>()->default_value("1"), "seed of the drawn prompt")
    ("tokens", po::value<std::int64_t>()->default_value(32), "tokens to generate (the first from the prefill)")
    ("strategy", po::value<std::string>()->default_value("P-LR-D"), strategy_help.c_str())
    ("attention", po::value<std::string>(), attention_help.c_str())
    ("balancing", po::value<std::string>(), balancing_help.c_str())
    ("placement", po::value<std::string>()->default_value("contiguous"), "expert placement over the ranks (as `moesim simulate`)")
    ("groups", po::value<std::int64_t>()->default_value(2), "replicated-groups: number of groups")
    ("placement-file", po::value<std::string>(), "a custom placement JSON")
    ("threads", po::value<std::int64_t>()->default_value(0),
     "OpenBLAS threads per rank (0: this host's cores / ranks on this host)")
    ("quiet", "no progress on stderr");
  // clang-format on
}

reference::RunOptions run_options(const po::variables_map& vm) {
  reference::RunOptions o;
  if (!vm.count("checkpoint")) {
    throw UserError("--checkpoint is required: a directory made by `moesim ref init` or a Hugging Face snapshot");
  }
  o.checkpoint = vm["checkpoint"].as<std::string>();
  if (vm.count("prompt")) {
    for (const auto id : parse_whole_numbers(vm["prompt"].as<std::string>(), "--prompt", 0, 1 << 30, "1,2,3"))
      o.prompt.push_back(static_cast<std::int32_t>(id));
  } else {
    o.prompt_length = vm["prompt-length"].as<std::int64_t>();
    if (o.prompt_length < 1 || o.prompt_length > 1 << 20) {
      throw UserError("--prompt-length " + std::to_string(o.prompt_length) + ": give 1 .. 1048576 tokens");
    }
    o.prompt_seed = parse_seed(vm["seed"].as<std::string>(), "--seed");
  }
  o.new_tokens = vm["tokens"].as<std::int64_t>();
  if (o.new_tokens < 1) throw UserError("--tokens " + std::to_string(o.new_tokens) + ": generate at least 1 token");
  const auto& preset = sim::strategy_by_name(vm["strategy"].as<std::string>());
  o.attention =
      vm.count("attention") ? sim::attention_mode_by_name(vm["attention"].as<std::string>()) : preset.attention;
  o.balancing = vm.count("balancing") ? sim::balancing_by_name(vm["balancing"].as<std::string>()) : preset.balancing;
  o.placement = vm["placement"].as<std::string>();
  o.groups = vm["groups"].as<std::int64_t>();
  if (vm.count("placement-file")) {
    o.placement_file = vm["placement-file"].as<std::string>();
    o.placement = "custom";
  }
  const auto threads = vm["threads"].as<std::int64_t>();
  if (threads < 0 || threads > 1024) throw UserError("--threads " + std::to_string(threads) + ": give 0 .. 1024");
  o.threads = static_cast<int>(threads);
  o.progress = vm.count("quiet") == 0;
  return o;
}

/// Reads the run options (and makes `check`'s checks) on every rank; a bad input on any rank stops them all
/// with its message (World::agree) before anything runs. Then runs; rank 0's result holds everything.
reference::RunResult run_on_every_rank(const reference::World& world, const po::variables_map& vm,
                                       const std::function<void(const reference::RunOptions&)>& check = {}) {
  std::string error;
  reference::RunOptions o;
  try {
    o = run_options(vm);
    if (check) check(o);
  } catch (const UserError& e) {
    error = e.what();
  }
  world.agree(error);
  return reference::run_reference(world, o);
}

const char* const kRunUsage =
    "usage: [mpirun -np N] moesim ref run --checkpoint DIR [--prompt 1,2,3 | --prompt-length N] [--tokens G] "
    "[options]\n\n"
    "Runs the reference Mixtral-architecture decoder (f32 on OpenBLAS) with greedy decoding. Under mpirun each "
    "rank is one node of the simulator's cluster and holds only the experts its placement gives it; "
    "decentralised ranks all run attention and the router and exchange expert outputs with one all-reduce per "
    "layer, centralised rank 0 runs them and exchanges inputs and outputs with the others (seed 000 §3-4). "
    "Prints tokens/s for prefill and decode and seed 000 Table 3's time split; writes the routing trace "
    "(the simulator's format), a per-step and per-layer timing CSV and the final logits on request.\n\n"
    "examples:\n"
    "  moesim ref init --config tinymistral-6x248m --out /tmp/tm\n"
    "  moesim ref run --checkpoint /tmp/tm --tokens 32\n"
    "  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe \\\n"
    "      moesim ref run --checkpoint /tmp/tm --strategy P-LR-D --trace-out tm.jsonl --timing-out tm.csv";

int cmd_ref_run(const Args& args, std::ostream& out) {
  po::options_description desc("options");
  add_run_options(desc);
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("trace-out", po::value<std::string>(), "write every token's routing here (.jsonl or .mtrace)")
    ("timing-out", po::value<std::string>(), "write per-step, per-layer timings here (CSV, seconds)")
    ("logits-out", po::value<std::string>(), "write the generated tokens and the last step's logits here (JSON)")
    ("json", "print the summary as JSON");
  // clang-format on
  po::variables_map vm;
  if (!parse_options(args, desc, vm, out, kRunUsage)) return 0;
  reference::World world;
  const auto r = run_on_every_rank(world, vm);
  if (world.rank() != 0) return 0;
  // Every output is opened first and committed together: none is left behind if another fails.
  OutputSet outputs;
  if (vm.count("trace-out"))
    sim::add_trace_output(outputs, r.trace, vm["trace-out"].as<std::string>(), std::nullopt, "--trace-out");
  if (vm.count("timing-out"))
    reference::write_timing_csv(r, outputs.add(vm["timing-out"].as<std::string>(), "--timing-out").stream());
  if (vm.count("logits-out"))
    outputs.add(vm["logits-out"].as<std::string>(), "--logits-out").stream()
        << reference::logits_json(r).dump() << "\n";
  outputs.commit();
  if (vm.count("json")) {
    out << reference::run_summary_json(r).dump(2) << "\n";
  } else {
    reference::print_run_summary(r, out);
  }
  return 0;
}

}  // namespace

int cmd_ref(const Args& args, std::ostream& out) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    out << "usage: moesim ref <init|run> [options]     (moesim ref <part> --help)\n\n"
           "The reference execution path: a real Mixtral-architecture MoE decoder on OpenBLAS, expert-parallel "
           "over MPI.\n"
           "  init   write a random-weight checkpoint of any Mixtral-family shape (safetensors + config.json)\n"
           "  run    decode with it, on one process or `mpirun -np N`, recording routing and timings\n"
           "`moesim validate` compares such a run with the simulator.\n";
    return 0;
  }
  const Args rest(args.begin() + 1, args.end());
  if (args[0] == "init") return cmd_ref_init(rest, out);
  if (args[0] == "run") return cmd_ref_run(rest, out);
  throw UserError("unknown part '" + args[0] + "'" + text::did_you_mean(args[0], {"init", "run"}) +
                  "; parts: init, run (see `moesim ref --help`)");
}

int cmd_validate(const Args& args, std::ostream& out) {
  // Two validations: the public measurement table (--table), or this machine's reference decoder.
  for (const auto& a : args)
    if (a == "--table" || a.starts_with("--table=") || a == "--llama-bench" || a.starts_with("--llama-bench="))
      return cmd_validate_table(args, out);
  po::options_description desc("options");
  add_run_options(desc);
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("hw", po::value<std::string>(), "this machine's node profile (from `moesim calibrate all`), id or path")
    ("nic", po::value<std::string>(), "the link between the ranks (e.g. from `mpirun -np 2 moesim calibrate net --mpi --out F`)")
    ("trace-out", po::value<std::string>(), "also write the run's routing trace here")
    ("json", "print the comparison as JSON");
  // clang-format on
  po::variables_map vm;
  if (!parse_options(args, desc, vm, out,
                     "usage: [mpirun -np N] moesim validate --checkpoint DIR --hw PROFILE [--nic PROFILE] [run "
                     "options]\n\n"
                     "Runs the reference decoder (as `moesim ref run`), then the simulator on the same model shape, "
                     "placement, strategy and rank count with the run's own routing trace, and prints predicted "
                     "vs measured decode time per token, seed 000 Table 3's split, and the error in %.\n\n"
                     "example:\n"
                     "  moesim validate --checkpoint /tmp/tm --hw hwprofiles/measured/my-host.json --tokens 64\n\n"
                     "`moesim validate --table DIR` compares moesim with a public measurement table instead "
                     "(validation/; --table --help).")) {
    return 0;
  }
  reference::World world;
  reference::ValidateOptions vo;
  const auto r = run_on_every_rank(world, vm, [&](const reference::RunOptions& o) {
    if (!vm.count("hw"))
      throw UserError("--hw is required: this machine's profile, from `moesim calibrate all --out F`");
    vo.hw = vm["hw"].as<std::string>();
    if (vm.count("nic")) vo.nic = vm["nic"].as<std::string>();
    reference::check_validate_options(vo, world.size());
    vo.placement = o.placement;
    vo.groups = o.groups;
    vo.placement_file = o.placement_file;
  });
  if (world.rank() != 0) return 0;
  const auto v = reference::validate_run(r, vo);
  if (vm.count("trace-out")) sim::write_trace(r.trace, vm["trace-out"].as<std::string>(), std::nullopt, "--trace-out");
  if (vm.count("json")) {
    out << reference::validate_json(r, v).dump(2) << "\n";
  } else {
    reference::print_run_summary(r, out);
    out << "\n";
    reference::print_validate(r, v, out);
  }
  return 0;
}

}  // namespace moesim::apps
