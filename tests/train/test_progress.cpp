#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/train/progress.h"

namespace kiln::train {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(ProgressBar, PlainLinesEveryTenthAndFinal) {
  double now = 100.0;
  std::ostringstream out;
  ProgressBar bar(
      20, out, /*is_tty=*/false, [&] { return now; }, /*width=*/10);
  for (int64_t step = 1; step < 20; ++step) {
    now = 100.0 + static_cast<double>(step);
    bar.update(step, {{"loss", 0.5}, {"accuracy", 0.25}}, step * 32);
  }
  now = 120.0;
  bar.update(20, {{"loss", 0.5}, {"accuracy", 0.25}}, 640);  // left to finish()
  bar.finish({{"loss", 0.4321}, {"accuracy", 0.87654}}, 640);

  const auto lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 10u);  // steps 2, 4, ..., 18 and the final line
  EXPECT_EQ(lines[0],
            " 2/20 [>.........] - ETA 18s - loss: 0.5000 - accuracy: 0.2500 - 32 samples/s");
  EXPECT_EQ(lines[4],
            "10/20 [====>.....] - ETA 10s - loss: 0.5000 - accuracy: 0.2500 - 32 samples/s");
  EXPECT_EQ(lines[9], "20/20 [==========] - 20s - loss: 0.4321 - accuracy: 0.8765 - 32 samples/s");
  EXPECT_EQ(out.str().find('\r'), std::string::npos);
}

TEST(ProgressBar, FewStepsPrintEachStepOnce) {
  double now = 0.0;
  std::ostringstream out;
  ProgressBar bar(
      3, out, false, [&] { return now; }, 6);
  now = 1.0;
  bar.update(1, {{"loss", 1.0}});
  bar.update(1, {{"loss", 1.0}});  // same decile: nothing
  now = 2.0;
  bar.update(2, {{"loss", 1.0}});
  now = 3.0;
  bar.finish({{"loss", 1.0}});
  bar.finish({{"loss", 2.0}});  // already finished
  const auto lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "1/3 [=>....] - ETA 2s - loss: 1.0000");
  EXPECT_EQ(lines[1], "2/3 [===>..] - ETA 1s - loss: 1.0000");
  EXPECT_EQ(lines[2], "3/3 [======] - 3s - loss: 1.0000");
}

TEST(ProgressBar, TerminalRedrawsWithCarriageReturn) {
  double now = 0.0;
  std::ostringstream out;
  ProgressBar bar(
      2, out, /*is_tty=*/true, [&] { return now; }, 4);
  now = 1.0;
  bar.update(1, {{"loss", 0.123456}, {"zeta", 1.0}});
  now = 2.0;
  bar.finish({{"loss", 0.1}});
  const std::string first = "\r1/2 [=>..] - ETA 1s - loss: 0.1235 - zeta: 1.0000";
  const std::string last = "\r2/2 [====] - 2s - loss: 0.1000";
  // The shorter final line blanks what is left of the longer one.
  EXPECT_EQ(out.str(), first + last + std::string(first.size() - last.size(), ' ') + "\n");
}

// Issue 16, defect 6: an 80-column terminal gets lines of at most 79 columns (a wrapped line
// leaves a new line at every redraw): the bar narrows, then the line is cut.
TEST(ProgressBar, LinesFitTheTerminal) {
  double now = 0.0;
  const std::map<std::string, double> many = {
      {"loss", 0.5}, {"accuracy", 0.25}, {"top5_accuracy", 0.75}, {"precision", 0.5}};
  std::ostringstream out;
  ProgressBar bar(
      469, out, /*is_tty=*/true, [&] { return now; }, /*width=*/30, /*columns=*/80);
  const std::string wide = ProgressBar(
                               469, out, true, [&] { return now; }, 30)
                               .format_line(100, many, 12800, false);
  ASSERT_GT(wide.size(), 79u);
  now = 1.0;
  const std::string line = bar.format_line(100, many, 12800, false);
  EXPECT_EQ(line.size(), 79u) << line;
  EXPECT_EQ(line.substr(0, 9), "100/469 [") << line;
  // A short line keeps the full bar.
  EXPECT_EQ(
      bar.format_line(100, {{"loss", 0.5}}, -1, false).find("[=====>" + std::string(24, '.') + "]"),
      8u);
}

// Throughput counts training time: validation runs after the last update, before finish().
TEST(ProgressBar, SamplesPerSecondLeaveOutValidation) {
  double now = 0.0;
  std::ostringstream out;
  ProgressBar bar(
      10, out, /*is_tty=*/true, [&] { return now; }, /*width=*/10);
  for (int64_t step = 1; step <= 10; ++step) {
    now = static_cast<double>(step);
    bar.update(step, {{"loss", 0.5}}, step * 100);
  }
  bar.validating();
  EXPECT_NE(out.str().find(" - validating..."), std::string::npos);
  now = 30.0;  // 20 s of validation
  bar.finish({{"loss", 0.5}, {"val_loss", 0.6}}, 1000);
  EXPECT_NE(out.str().find("- 30s - loss: 0.5000 - val_loss: 0.6000 - 100 samples/s"),
            std::string::npos)
      << out.str();
}

TEST(ProgressBar, Durations) {
  EXPECT_EQ(format_duration(0.4), "0s");
  EXPECT_EQ(format_duration(59.4), "59s");
  EXPECT_EQ(format_duration(65), "1:05");
  EXPECT_EQ(format_duration(3665), "1:01:05");
}

}  // namespace
}  // namespace kiln::train
