// Comma-separated tables (model/csv.hpp): RFC 4180 quoting, one record per line, and the refusals.

#include <gtest/gtest.h>

#include "moesim/model/csv.hpp"
#include "moesim/model/error.hpp"

namespace moesim::csv {
namespace {

TEST(Csv, QuotedFieldsHoldCommasAndDoubledQuotes) {
  const auto f = split_record(R"(a,"b, c","say ""hi""",,last)", "t");
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[1], "b, c");
  EXPECT_EQ(f[2], R"(say "hi")");
  EXPECT_EQ(f[3], "");
  EXPECT_EQ(f[4], "last");
  EXPECT_EQ(split_record("x,y\r", "t").back(), "y");  // a CRLF file
  EXPECT_EQ(split_record("", "t").size(), 1u);        // one empty field
}

TEST(Csv, UnclosedQuoteAndTextAfterAQuoteAreRefused) {
  EXPECT_THROW((void)split_record(R"(a,"b)", "t"), UserError);
  EXPECT_THROW((void)split_record(R"(a,"b"c)", "t"), UserError);
}

TEST(Csv, TableChecksTheFieldCountAndNamesColumns) {
  const Table t = parse_table("id,value\n\nx,1\n\"y,z\",2\n", "m.csv");
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[1][0], "y,z");
  EXPECT_EQ(t.line_of[1], 4);
  EXPECT_EQ(t.column("value"), 1u);
  try {
    (void)t.column("unit");
    FAIL() << "no such column";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("m.csv: no column 'unit'; its columns are id, value"), std::string::npos)
        << e.what();
  }
  try {
    (void)parse_table("id,value\nx,1,2\n", "m.csv");
    FAIL() << "three fields under a two-column header";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("m.csv: line 2: 3 fields, but the header has 2"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)parse_table("", "empty.csv"), UserError);
}

}  // namespace
}  // namespace moesim::csv
