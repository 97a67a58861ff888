#pragma once
// The catalogue of bad inputs of test_bad_input_catalogue.cpp: its cases, one group per command, and the
// input files they read. Kept apart from the checks so that each file stays short enough to read whole.

#include <string>
#include <vector>

#include "cli_support.hpp"

namespace moesim::test {

struct CatalogueCase {
  const char* name;
  std::string args;                       ///< "{d}" is replaced by the scratch folder
  std::vector<std::string> must_mention;  ///< substrings of the one-line message ("{d}" replaced too)
  std::vector<std::string> outputs;       ///< files (in the scratch folder) that must not exist afterwards
};

/// Writes the input files the catalogue's cases read ("{d}/...") into the scratch folder.
void write_catalogue_inputs(const Scratch& s);

/// Every case of the catalogue, grouped by command, in a fixed order.
std::vector<CatalogueCase> catalogue_cases();

}  // namespace moesim::test
