// `moesim trace gen|stats|convert`: routing traces (issue 3, part 1). The formats, the generator's model and
// the statistics' definitions are in sim/TRACES.md; the code is in sim/trace_*.hpp. This file dispatches the
// subcommands and runs `convert`; `gen` and `stats` are in apps/trace_gen_cmd.cpp and apps/trace_stats_cmd.cpp.
// Each only parses arguments, calls the libraries and prints.

#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>

#include "commands.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/registry.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/trace_import.hpp"
#include "moesim/sim/trace_io.hpp"

namespace po = boost::program_options;

namespace moesim::apps {
namespace {

const char* const kTraceUsage =
    "usage: moesim trace gen|stats|convert [options]     (moesim trace <sub> --help for its options)\n\n"
    "Routing traces: what each token's router chose, per MoE layer (formats: sim/TRACES.md).\n"
    "  gen      make a synthetic trace (uniform, Zipf or Dirichlet popularity, temporal locality), with\n"
    "           parameters named after the statistics they produce, and presets matching published measurements\n"
    "  stats    load max/mean, reuse, LRU hit rate per cache size, distinct experts per batch, per-node load,\n"
    "           degenerate layers\n"
    "  convert  between .jsonl and .mtrace, and import MoE_expert_selection_trace, speculative-moe and vLLM files\n"
    "           (the format is detected when --from is not given)\n"
    "Every input may be gzip or zstd compressed.\n";

// ------------------------------------------------------------------------------------------------------
// convert

/// The registered importers, a line each.
std::string import_formats_help() {
  std::string s;
  for (const auto& f : sim::import_formats()) s += "  " + f.name + ": " + f.description + "\n";
  return s;
}

int trace_convert(Args args, std::ostream& out) {
  const auto inputs = take_inputs(args);
  po::options_description desc("options");
  desc.add_options()("help,h", "show this help")("out", po::value<std::string>(),
                                                 "output file: .jsonl or .mtrace; written atomically")(
      "format", po::value<std::string>(),
      ("output format " + choices_in(sim::trace_formats()) + ", when --out's extension does not say").c_str())(
      "from", po::value<std::string>(),
      ("input format: " + text::join(names_in(sim::trace_formats())) + " (moesim's own), " +
       text::join(names_in(sim::import_formats())) + "; detected when not given")
          .c_str())(
      "model", po::value<std::string>(),
      "the model the trace was recorded with: gives the expert count importers need, and checks layers/top-k")(
      "experts", po::value<std::int64_t>(), "routed experts per layer, when the model is not in the zoo")(
      "decode-only", "leave out the prompt (prefill) tokens (moe-selection, vllm, speculative-moe raw files)");
  po::variables_map vm;
  if (!parse_options(
          args, desc, vm, out,
          "usage: moesim trace convert IN [IN...] --out OUT [--from FORMAT] [--model M | --experts E]\n\n"
          "Converts between moesim's formats (lossless: .jsonl <-> .mtrace gives back the same bytes) and imports "
          "(--from):\n" +
              import_formats_help() +
              "Without --from the format is told from each file's start. Inputs may be gzip or zstd compressed.\n"
              "These files do not state the number of experts: give --model (a zoo id or config.json) or --experts.")) {
    return 0;
  }
  if (inputs.empty()) throw UserError("give the input file(s): moesim trace convert IN [IN...] --out OUT");
  if (!vm.count("out")) throw UserError("--out is missing; give the file to write (.jsonl or .mtrace)");
  const std::string out_path = vm["out"].as<std::string>();
  const auto format = vm.count("format") ? sim::parse_trace_format(vm["format"].as<std::string>(), "--format")
                                         : sim::trace_format_for_path(out_path, "--out");
  if (vm.count("model") && vm.count("experts")) {
    throw UserError("--model and --experts both give the expert count; give one of them");
  }
  std::optional<model::Architecture> arch;
  if (vm.count("model")) {
    arch = model::load_model(vm["model"].as<std::string>());
    if (!arch->is_moe()) throw UserError("--model " + arch->id + " is a dense model; routing traces need experts");
  }
  // A plain enum and a flag rather than an optional: GCC 12 warns (falsely) about the optional here.
  bool importing = false;
  sim::ImportFormat from = sim::ImportFormat::Vllm;
  if (vm.count("from")) {
    if (const auto f = sim::parse_import_format(vm["from"].as<std::string>(), "--from")) {
      importing = true;
      from = *f;
    }
  } else {
    // No --from: tell each input's format from its start (sim/trace_import.hpp), and say what was found.
    std::string first_name, first_path;
    for (const auto& in : inputs) {
      const auto d = sim::detect_trace_format(in);
      if (!first_name.empty() && d.name != first_name) {
        throw UserError(in + ": looks like " + d.name + " (" + d.evidence + ") but " + first_path + " looks like " +
                        first_name + "; convert them separately, or give --from FORMAT");
      }
      if (first_name.empty()) {
        first_name = d.name;
        first_path = in;
        if (d.format) {
          importing = true;
          from = *d.format;
          std::cerr << "moesim trace convert: " << in << ": reading it as " << d.name << " (" << d.evidence
                    << "); give --from to choose\n";
        }
      }
    }
  }
  sim::RoutingTrace trace;
  if (!importing) {
    if (inputs.size() != 1) {
      throw UserError("moesim's own formats convert one file at a time (got " + std::to_string(inputs.size()) +
                      " inputs); to import several files give --from moe-selection or --from vllm");
    }
    if (vm.count("decode-only")) {
      throw UserError(
          "--decode-only applies to the imported formats (moe-selection, speculative-moe, vllm), not to "
          "moesim's own");
    }
    trace = sim::read_trace(inputs[0]);
    if (arch) sim::check_trace_matches(trace, *arch, inputs[0]);
  } else {
    sim::ImportOptions io;
    if (arch) {
      io.experts = arch->routed_experts;
      io.layers = model::moe_layer_count(*arch);
      io.top_k = arch->top_k;
      io.model = arch->id;
    } else if (vm.count("experts")) {
      io.experts = vm["experts"].as<std::int64_t>();
    }
    io.include_prefill = !vm.count("decode-only");
    // What an importer drops (incomplete tokens, ...) is said on stderr as well as in the header's source.
    io.note = [](const std::string& line) { std::cerr << "moesim trace convert: " << line << "\n"; };
    trace = sim::import_trace(from, inputs, io);
  }
  for (const auto& in : inputs) {
    std::error_code ec;
    if (std::filesystem::equivalent(in, out_path, ec)) {
      throw UserError("--out " + out_path + " is the input file; write to another path");
    }
  }
  sim::write_trace(trace, out_path, format, "--out");
  out << "wrote " << out_path << " (" << sim::trace_format_name(format) << "): " << trace.tokens() << " tokens, "
      << sim::count_requests(trace) << (sim::count_requests(trace) == 1 ? " request, " : " requests, ")
      << trace.header.layers << " MoE layers, " << trace.header.experts << " experts, top-" << trace.header.top_k
      << (trace.has_weights() ? ", gate weights" : ", no gate weights") << "\n";
  return 0;
}

}  // namespace

int cmd_trace(const Args& args, std::ostream& out) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    out << kTraceUsage;
    return 0;
  }
  if (args.empty()) {
    throw UserError("give a subcommand: moesim trace gen|stats|convert (see `moesim trace --help`)");
  }
  const std::string& sub = args[0];
  Args rest(args.begin() + 1, args.end());
  if (sub == "gen") return cmd_trace_gen(rest, out);
  if (sub == "stats") return cmd_trace_stats(rest, out);
  if (sub == "convert") return trace_convert(rest, out);
  std::string hint = text::did_you_mean(sub, {"gen", "stats", "convert"});
  for (const char* c : {"gen", "stats", "convert"}) {
    if (hint.empty() && sub.rfind(c, 0) == 0) hint = std::string(" (did you mean '") + c + "'?)";  // "generate"
  }
  throw UserError("unknown trace subcommand '" + sub + "'" + hint +
                  "; valid: gen, stats, convert (see `moesim trace --help`)");
}

}  // namespace moesim::apps