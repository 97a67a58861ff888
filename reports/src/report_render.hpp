#pragma once
// The report's document model, rendered twice: as Markdown (report.md) and as self-contained HTML
// (report.html, plots embedded as PNG). Internal to the reports module: write_report (report.cpp) builds
// the blocks, section by section, and renders them once at the end.

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace moesim::reports::report_doc {

// ---- a small document model rendered twice: Markdown and self-contained HTML ----

struct Block {
  enum Kind { H1, H2, Para, Bullets, TableBlock, Figure } kind = Para;
  Block(Kind k, std::string t, std::vector<std::string> i = {}, std::vector<std::string> h = {},
        std::vector<std::vector<std::string>> r = {}, std::string f = {})
      : kind(k),
        text(std::move(t)),
        items(std::move(i)),
        headers(std::move(h)),
        rows(std::move(r)),
        figure(std::move(f)) {}
  std::string text;  ///< heading, paragraph, figure caption
  std::vector<std::string> items;
  std::vector<std::string> headers;
  std::vector<std::vector<std::string>> rows;
  std::string figure;  ///< plot name (files <name>.png/.svg/.csv/.gp)
};

/// report.md: the blocks as Markdown; a figure links its PNG and its .svg, .csv and .gp files.
std::string render_markdown(const std::vector<Block>& doc);

/// report.html: the blocks as one self-contained page titled `title`, each figure's PNG read from `dir` and
/// embedded (base64); report.html?figure=<name> shows that figure alone.
std::string render_html(const std::vector<Block>& doc, const std::filesystem::path& dir, const std::string& title);

}  // namespace moesim::reports::report_doc
