#include "report_render.hpp"

#include <fstream>
#include <sstream>

#include "moesim/scenario/table.hpp"

// The renderings of report_render.hpp (moved here from report.cpp, unchanged: report.md and report.html
// stay byte-identical).

namespace moesim::reports::report_doc {

namespace fs = std::filesystem;

namespace {

std::string html_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    switch (ch) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += ch;
    }
  }
  return o;
}

/// Markdown inline markup this report uses (**bold**, [text](href)) as HTML.
std::string inline_html(const std::string& md) {
  std::string s = html_escape(md), o;
  bool bold = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 2, "**") == 0) {
      o += bold ? "</b>" : "<b>";
      bold = !bold;
      ++i;
    } else if (s[i] == '[') {
      const auto close = s.find("](", i);
      const auto end = close == std::string::npos ? std::string::npos : s.find(')', close);
      if (end == std::string::npos) {
        o += s[i];
        continue;
      }
      o += "<a href=\"" + s.substr(close + 2, end - close - 2) + "\">" + s.substr(i + 1, close - i - 1) + "</a>";
      i = end;
    } else {
      o += s[i];
    }
  }
  if (bold) o += "</b>";
  return o;
}

std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string o;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const auto n = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                   static_cast<unsigned char>(bytes[i + 2]);
    o += {k[(n >> 18) & 63], k[(n >> 12) & 63], k[(n >> 6) & 63], k[n & 63]};
  }
  if (i + 1 == bytes.size()) {
    const auto n = static_cast<unsigned char>(bytes[i]) << 16;
    o += {k[(n >> 18) & 63], k[(n >> 12) & 63], '=', '='};
  } else if (i + 2 == bytes.size()) {
    const auto n = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8);
    o += {k[(n >> 18) & 63], k[(n >> 12) & 63], k[(n >> 6) & 63], '='};
  }
  return o;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::string render_markdown(const std::vector<Block>& doc) {
  std::ostringstream o;
  for (const auto& b : doc) {
    switch (b.kind) {
      case Block::H1:
        o << "# " << b.text << "\n\n";
        break;
      case Block::H2:
        o << "## " << b.text << "\n\n";
        break;
      case Block::Para:
        o << b.text << "\n\n";
        break;
      case Block::Bullets:
        for (const auto& i : b.items) o << "- " << i << "\n";
        o << "\n";
        break;
      case Block::TableBlock: {
        scenario::Table t(b.headers);
        for (const auto& r : b.rows) t.add_row(r);
        t.print_markdown(o);
        o << "\n";
        break;
      }
      case Block::Figure:
        o << "![" << b.text << "](" << b.figure << ".png)\n\n*" << b.text << "* Files: [" << b.figure << ".svg]("
          << b.figure << ".svg), data [" << b.figure << ".csv](" << b.figure << ".csv), script [" << b.figure << ".gp]("
          << b.figure << ".gp).\n\n";
        break;
    }
  }
  return o.str();
}

std::string render_html(const std::vector<Block>& doc, const fs::path& dir, const std::string& title) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << html_escape(title)
    << "</title>\n<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}"
       "table{border-collapse:collapse;margin:1em 0;font-size:90%}td,th{border:1px solid #ccc;padding:3px 8px;"
       "text-align:right}td:first-child,th:first-child{text-align:left}th{background:#f4f4f4}"
       "figure{margin:1.5em 0}figure img{max-width:100%;border:1px solid #eee}figcaption{font-size:90%;color:#444}"
       ".answer{background:#f3f8ff;border-left:4px solid #3a7bd5;padding:.5em 1em}</style></head><body>\n";
  bool first_bullets = true;
  for (const auto& b : doc) {
    switch (b.kind) {
      case Block::H1:
        o << "<h1>" << inline_html(b.text) << "</h1>\n";
        break;
      case Block::H2:
        o << "<h2>" << inline_html(b.text) << "</h2>\n";
        break;
      case Block::Para:
        o << "<p>" << inline_html(b.text) << "</p>\n";
        break;
      case Block::Bullets:
        o << (first_bullets ? "<ul class=\"answer\">\n" : "<ul>\n");
        first_bullets = false;
        for (const auto& i : b.items) o << "<li>" << inline_html(i) << "</li>\n";
        o << "</ul>\n";
        break;
      case Block::TableBlock:
        o << "<table><tr>";
        for (const auto& h : b.headers) o << "<th>" << inline_html(h) << "</th>";
        o << "</tr>\n";
        for (const auto& r : b.rows) {
          o << "<tr>";
          for (const auto& c : r) o << "<td>" << inline_html(c) << "</td>";
          o << "</tr>\n";
        }
        o << "</table>\n";
        break;
      case Block::Figure:
        o << "<figure id=\"" << b.figure << "\"><img alt=\"" << html_escape(b.text) << "\" src=\"data:image/png;base64,"
          << base64(slurp(dir / (b.figure + ".png"))) << "\"><figcaption>" << inline_html(b.text)
          << " Files: <a href=\"" << b.figure << ".svg\">SVG</a>, <a href=\"" << b.figure
          << ".csv\">data</a>, <a href=\"" << b.figure << ".gp\">gnuplot script</a>.</figcaption></figure>\n";
        break;
    }
  }
  // report.html?figure=<name> shows that figure alone (for linking one plot, and for the screenshot test).
  o << "<script>(function(){var f=new URLSearchParams(location.search).get('figure');if(!f)return;"
       "var k=document.getElementById(f);if(!k)return;document.body.innerHTML='';document.body.appendChild(k);})();"
       "</script>\n</body></html>\n";
  return o.str();
}

}  // namespace moesim::reports::report_doc
