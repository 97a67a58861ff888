#pragma once
// The man page and the shell completions of `moesim` (issue 21: "a tool that installs"), generated from the
// same text as `--help`: each command's help is what its own option table (boost::program_options) prints,
// so a flag added to a command appears in `--help`, the man page and the completions at once.
//
// `moesim docs man` writes moesim(1) in man(7) macros (groff_man(7)); `moesim docs bash` a bash
// completion script for bash-completion's `complete -F` (bash(1), "Programmable Completion"); `moesim docs
// zsh` a zsh one for compsys (zshcompsys(1), `#compdef`). `cmake --install` installs all three.

#include <string>
#include <vector>

namespace moesim::apps {

/// One command as the documents show it: its name ("serve", or "calibrate fit" for a part), the one-line
/// summary of `moesim --help`, and the whole text its `--help` prints.
struct CommandDoc {
  std::string name;
  std::string summary;
  std::string help;
};

/// The long options ("--rate", "--help") of an option table as its `--help` text prints them: the
/// lines that start with blanks and a dash, in order, each once.
std::vector<std::string> flags_in_help(const std::string& help);

/// moesim(1): NAME, SYNOPSIS, DESCRIPTION (`overview`, the text of `moesim --help`), one subsection per
/// command with its help verbatim, EXIT STATUS, FILES and SEE ALSO.
std::string man_page(const std::string& overview, const std::vector<CommandDoc>& commands);

/// A bash completion script: command names after `moesim`, parts after a command with parts, and each
/// command's flags after it; file names elsewhere.
std::string bash_completion(const std::vector<CommandDoc>& commands);

/// The same for zsh (`#compdef moesim`).
std::string zsh_completion(const std::vector<CommandDoc>& commands);

}  // namespace moesim::apps
