#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "kiln/data/csv.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

class CsvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln_csv_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& text, const std::string& name = "data.csv") {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  std::string message_of(const std::string& text, const CsvOptions& options = {}) {
    std::string path = write(text);
    try {
      read_csv(path, options);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }

  fs::path dir_;
};

CsvOptions target(std::variant<std::string, int64_t> column, DType dtype = DType::Int64) {
  CsvOptions o;
  o.target_column = std::move(column);
  o.target_dtype = dtype;
  return o;
}

TEST_F(CsvTest, HeaderAndNamedTarget) {
  auto ds = read_csv(write("a,b,label\n1,2.5,0\n-3,4e1,2\n"), target("label"));
  EXPECT_EQ(ds->data().shape(), (Shape{2, 2}));
  EXPECT_EQ(ds->data().dtype(), DType::Float32);
  EXPECT_EQ(ds->data().to_vector<double>(), (std::vector<double>{1, 2.5, -3, 40}));
  EXPECT_EQ(ds->target().dtype(), DType::Int64);
  EXPECT_EQ(ds->target().to_vector<int64_t>(), (std::vector<int64_t>{0, 2}));
}

TEST_F(CsvTest, TargetByIndexAnywhereAndFloatTarget) {
  std::string path = write("y,a,b\n0.5,1,2\n1.5,3,4\n");
  auto ds = read_csv(path, target(int64_t{0}, DType::Float32));
  EXPECT_EQ(ds->data().to_vector<double>(), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(ds->target().dtype(), DType::Float32);
  EXPECT_EQ(ds->target().to_vector<double>(), (std::vector<double>{0.5, 1.5}));
  auto last = read_csv(path, target(int64_t{-1}, DType::Float64));
  EXPECT_EQ(last->data().to_vector<double>(), (std::vector<double>{0.5, 1, 1.5, 3}));
  EXPECT_EQ(last->target().to_vector<double>(), (std::vector<double>{2, 4}));
}

TEST_F(CsvTest, NoHeaderNoTargetFloat64) {
  CsvOptions o;
  o.header = false;
  o.dtype = DType::Float64;
  auto ds = read_csv(write("1,2\n3,4\n5,6"), o);  // no final newline
  EXPECT_EQ(ds->data().shape(), (Shape{3, 2}));
  EXPECT_EQ(ds->data().dtype(), DType::Float64);
  EXPECT_FALSE(ds->target().defined());
  EXPECT_EQ(ds->get(2).data.to_vector<double>(), (std::vector<double>{5, 6}));
}

TEST_F(CsvTest, QuotesCrlfBomBlankLinesAndSpaces) {
  std::string text =
      "\xEF\xBB\xBF\"x,1\",\"say \"\"hi\"\"\",cls\r\n"
      "\"1\", 2 ,\"3.0\"\r\n"
      "\r\n"
      "+4,-5e-1,1\r\n"
      "\r\n\n";
  auto ds = read_csv(write(text), target("cls"));
  EXPECT_EQ(ds->data().to_vector<double>(), (std::vector<double>{1, 2, 4, -0.5}));
  EXPECT_EQ(ds->target().to_vector<int64_t>(), (std::vector<int64_t>{3, 1}));
  // The quoted name with a delimiter inside is one column.
  EXPECT_EQ(read_csv(write(text), target("x,1", DType::Float32))->data().shape(), (Shape{2, 2}));
  EXPECT_EQ(read_csv(write(text), target("say \"hi\"", DType::Float32))->target().numel(), 2);
}

TEST_F(CsvTest, OtherDelimiter) {
  CsvOptions o = target("t");
  o.delimiter = ';';
  auto ds = read_csv(write("a;b;t\n1.5;\"2\";7\n"), o);
  EXPECT_EQ(ds->data().to_vector<double>(), (std::vector<double>{1.5, 2}));
  EXPECT_EQ(ds->target().to_vector<int64_t>(), (std::vector<int64_t>{7}));
  // Numbers are read in the C locale: a decimal comma is not a number.
  EXPECT_NE(message_of("a;t\n1,5;2\n", o).find("expected a number, but got \"1,5\""),
            std::string::npos);
}

TEST_F(CsvTest, RaggedRowNamesLineAndOffset) {
  std::string msg = message_of("a,b,c\n1,2,3\n4,5\n");
  EXPECT_NE(msg.find("[read_csv]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("data.csv' line 3, byte offset 12: expected 3 fields (as the header has), "
                     "but got 2"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("test_csv.cpp"), std::string::npos) << msg;
  CsvOptions no_header;
  no_header.header = false;
  msg = message_of("1,2\n3,4,5\n", no_header);
  EXPECT_NE(msg.find("line 2, byte offset 4: expected 2 fields (as the first row has), but got 3"),
            std::string::npos)
      << msg;
}

TEST_F(CsvTest, NonNumericCellNamesLineColumnAndOffset) {
  std::string msg = message_of("a,b,c\n1,2,3\n4,x5,6\n");
  EXPECT_NE(msg.find("line 3, column 2 (\"b\"), byte offset 14: expected a number, but got \"x5\""),
            std::string::npos)
      << msg;
  msg = message_of("a,b\n1,\n");
  EXPECT_NE(msg.find("line 2, column 2 (\"b\"), byte offset 6: expected a number, but got \"\""),
            std::string::npos)
      << msg;
  // Line numbers count the line breaks inside quoted fields.
  msg = message_of("\"a\",\"b\nb2\"\n1,2\n1,zz\n");
  EXPECT_NE(msg.find("line 4, column 2 (\"b\nb2\"), byte offset 17"), std::string::npos) << msg;
}

TEST_F(CsvTest, LabelsMustBeIntegers) {
  auto ds = read_csv(write("a,y\n1,3.0\n2,-1\n"), target("y"));
  EXPECT_EQ(ds->target().to_vector<int64_t>(), (std::vector<int64_t>{3, -1}));
  std::string msg = message_of("a,y\n1,1.5\n", target("y"));
  EXPECT_NE(msg.find("column 2 (\"y\"), byte offset 6: expected an integer label, but got \"1.5\""),
            std::string::npos)
      << msg;
}

TEST_F(CsvTest, QuotingErrors) {
  std::string msg = message_of("a,b\n1,\"2\n");
  EXPECT_NE(msg.find("line 2, byte offset 6: expected a closing quote"), std::string::npos) << msg;
  msg = message_of("a,b\n1,\"2\"x\n");
  EXPECT_NE(msg.find("line 2, byte offset 9: expected a delimiter or the end of the line after a "
                     "closing quote, but got 'x'"),
            std::string::npos)
      << msg;
}

TEST_F(CsvTest, TargetAndFileErrors) {
  std::string msg = message_of("a,b\n1,2\n", target("c"));
  EXPECT_NE(msg.find("expected a target column named \"c\", but the header has [a, b]"),
            std::string::npos)
      << msg;
  msg = message_of("a,a\n1,2\n", target("a"));
  EXPECT_NE(msg.find("is ambiguous"), std::string::npos) << msg;
  msg = message_of("a,b\n1,2\n", target(int64_t{2}));
  EXPECT_NE(msg.find("expected a target column index in [-2, 2), but got 2"), std::string::npos)
      << msg;
  EXPECT_NE(message_of("a,b\n\n").find("expected at least one data row"), std::string::npos);
  EXPECT_NE(message_of("").find("expected a header row"), std::string::npos);
  try {
    read_csv((dir_ / "missing.csv").string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("missing.csv"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::data
