#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/train/curves.h"
#include "tests/support/test_util.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;

using test::expect_error;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A parsed element: its name, attributes, text content (direct) and children.
struct Node {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;
  std::vector<Node> children;

  double num(const std::string& key) const { return std::stod(attrs.at(key)); }
  // Every descendant (self included) named `name`, depth first.
  void find_all(const std::string& tag, std::vector<const Node*>& out) const {
    if (name == tag) out.push_back(this);
    for (const auto& c : children) c.find_all(tag, out);
  }
  std::vector<const Node*> all(const std::string& tag) const {
    std::vector<const Node*> out;
    find_all(tag, out);
    return out;
  }
};

// A strict little XML reader for what the writer emits: balanced tags, quoted attributes, no
// stray '<' or '&' (entities must be the five predefined ones). Fails the test otherwise.
Node parse_xml(const std::string& text) {
  static const std::regex tag_re(R"(<(/?)([A-Za-z][\w-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(/?)>)");
  static const std::regex attr_re(R"(([\w:-]+)="([^"]*)\")");
  static const std::regex entity_re(R"(&(?:amp|lt|gt|quot|apos);)");
  Node root;
  std::vector<Node*> stack{&root};
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t lt = text.find('<', pos);
    const std::string chunk =
        text.substr(pos, lt == std::string::npos ? std::string::npos : lt - pos);
    EXPECT_EQ(std::regex_replace(chunk, entity_re, "").find('&'), std::string::npos) << chunk;
    stack.back()->text += chunk;
    if (lt == std::string::npos) break;
    std::smatch m;
    const std::string rest = text.substr(lt);
    if (!std::regex_search(rest, m, tag_re, std::regex_constants::match_continuous)) {
      ADD_FAILURE() << "malformed tag at " << lt << ": " << rest.substr(0, 60);
      return root;
    }
    if (m[1] == "/") {
      EXPECT_EQ(stack.back()->name, m[2].str()) << "unbalanced close at " << lt;
      if (stack.size() > 1) stack.pop_back();
    } else {
      Node node{m[2].str(), {}, {}, {}};
      const std::string attrs = m[3].str();
      for (std::sregex_iterator it(attrs.begin(), attrs.end(), attr_re), end; it != end; ++it) {
        EXPECT_EQ(node.attrs.count((*it)[1].str()), 0u) << "duplicate attribute";
        node.attrs[(*it)[1].str()] = (*it)[2].str();
      }
      stack.back()->children.push_back(std::move(node));
      if (m[4] != "/") stack.push_back(&stack.back()->children.back());
    }
    pos = lt + static_cast<size_t>(m.length(0));
  }
  EXPECT_EQ(stack.size(), 1u) << "unclosed element " << stack.back()->name;
  return root;
}

const Node* panel(const Node& svg, const std::string& metric) {
  for (const Node* g : svg.all("g"))
    if (g->attrs.count("class") && g->attrs.at("class") == "panel" &&
        g->attrs.at("data-metric") == metric)
      return g;
  return nullptr;
}

const Node* series(const Node& p, const std::string& key) {
  for (const Node* g : p.all("g"))
    if (g->attrs.count("data-key") && g->attrs.at("data-key") == key) return g;
  return nullptr;
}

std::vector<std::pair<double, double>> points(const Node& polyline) {
  std::vector<std::pair<double, double>> out;
  std::istringstream in(polyline.attrs.at("points"));
  std::string pair;
  while (in >> pair) {
    const size_t comma = pair.find(',');
    out.emplace_back(std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1)));
  }
  return out;
}

std::vector<std::string> texts(const Node& p, const std::string& cls) {
  std::vector<std::string> out;
  for (const Node* t : p.all("text"))
    if (t->attrs.count("class") && t->attrs.at("class") == cls) out.push_back(t->text);
  return out;
}

History four_epochs() {
  History h;
  h.metrics["loss"] = {0.9, 0.5, 0.4, 0.3};
  h.metrics["val_loss"] = {1.0, 0.6, 0.55, 0.5};
  h.metrics["accuracy"] = {0.6, 0.8, 0.85, 0.9};
  h.metrics["val_accuracy"] = {0.55, 0.75, 0.8, 0.82};
  return h;
}

TEST(Curves, StructureLabelsAndValueMapping) {
  const std::string svg = training_curves_svg(four_epochs());
  ASSERT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_EQ(svg.find("href"), std::string::npos);  // nothing external
  const Node root = parse_xml(svg);
  ASSERT_EQ(root.children.size(), 1u);
  const Node& doc = root.children[0];
  EXPECT_EQ(doc.name, "svg");
  ASSERT_EQ(doc.all("title").size(), 1u);

  // Panels: loss first, then accuracy.
  std::vector<std::string> order;
  for (const Node* g : doc.all("g"))
    if (g->attrs.count("class") && g->attrs.at("class") == "panel")
      order.push_back(g->attrs.at("data-metric"));
  EXPECT_EQ(order, (std::vector<std::string>{"loss", "accuracy"}));

  const Node* loss = panel(doc, "loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(texts(*loss, "title"), std::vector<std::string>{"loss"});
  EXPECT_EQ(texts(*loss, "legend-label"), (std::vector<std::string>{"loss", "val_loss"}));
  EXPECT_EQ(texts(*loss, "xtick"), (std::vector<std::string>{"1", "2", "3", "4"}));
  EXPECT_EQ(texts(*loss, "xlabel"), std::vector<std::string>{"epoch"});
  const auto yticks = texts(*loss, "ytick");
  ASSERT_EQ(yticks.size(), 5u);
  EXPECT_EQ(yticks.front(), "0.3");  // the data's range, bottom to top
  EXPECT_EQ(yticks.back(), "1");

  // The panel's largest value (val_loss at epoch 1) sits at the top of the data area, the
  // smallest (loss at epoch 4) at the bottom; epochs span the width.
  const double top = loss->num("data-y-top"), bottom = loss->num("data-y-bottom");
  const double left = loss->num("data-x-left"), right = loss->num("data-x-right");
  EXPECT_LT(top, bottom);
  const Node* val = series(*loss, "val_loss");
  const Node* train = series(*loss, "loss");
  ASSERT_TRUE(val && train);
  ASSERT_EQ(val->all("polyline").size(), 1u);
  ASSERT_EQ(train->all("polyline").size(), 1u);
  EXPECT_TRUE(val->all("circle").empty());
  const auto vp = points(*val->all("polyline")[0]);
  const auto tp = points(*train->all("polyline")[0]);
  ASSERT_EQ(vp.size(), 4u);
  ASSERT_EQ(tp.size(), 4u);
  EXPECT_NEAR(vp[0].second, top, 0.01);
  EXPECT_NEAR(tp[3].second, bottom, 0.01);
  EXPECT_NEAR(vp[0].first, left, 0.01);
  EXPECT_NEAR(tp[3].first, right, 0.01);
  // Linear in between: 0.5 is 2/7 of the way up from 0.3 to 1.0.
  EXPECT_NEAR(tp[1].second, bottom - (bottom - top) * (0.2 / 0.7), 0.01);
  EXPECT_NEAR(tp[1].first, left + (right - left) / 3, 0.01);

  // The accuracy panel is below the loss panel.
  const Node* acc = panel(doc, "accuracy");
  ASSERT_NE(acc, nullptr);
  EXPECT_GT(acc->num("data-y-top"), bottom);
  const auto ap = points(*series(*acc, "accuracy")->all("polyline")[0]);
  EXPECT_NEAR(ap[3].second, acc->num("data-y-top"), 0.01);  // 0.9 is the panel's max
}

TEST(Curves, SingleEpochIsADotAndNaNLeavesGaps) {
  History one;
  one.metrics["loss"] = {0.7};
  one.metrics["val_loss"] = {0.8};
  Node root = parse_xml(training_curves_svg(one));
  const Node* p = panel(root, "loss");
  ASSERT_NE(p, nullptr);
  for (const char* key : {"loss", "val_loss"}) {
    const Node* s = series(*p, key);
    ASSERT_NE(s, nullptr) << key;
    EXPECT_TRUE(s->all("polyline").empty()) << key;
    ASSERT_EQ(s->all("circle").size(), 1u) << key;
    EXPECT_NEAR(s->all("circle")[0]->num("cx"),
                (p->num("data-x-left") + p->num("data-x-right")) / 2, 0.01);
  }
  EXPECT_NEAR(series(*p, "val_loss")->all("circle")[0]->num("cy"), p->num("data-y-top"), 0.01);

  History gaps;
  gaps.metrics["loss"] = {1, 2, kNaN, 3, 4, std::numeric_limits<double>::infinity(), 5};
  root = parse_xml(training_curves_svg(gaps));
  p = panel(root, "loss");
  ASSERT_NE(p, nullptr);
  const Node* s = series(*p, "loss");
  const auto lines = s->all("polyline");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(points(*lines[0]).size(), 2u);
  EXPECT_EQ(points(*lines[1]).size(), 2u);
  ASSERT_EQ(s->all("circle").size(), 1u);  // epoch 7 stands alone
  EXPECT_EQ(s->all("circle")[0]->attrs.at("data-epoch"), "7");
  EXPECT_NEAR(s->all("circle")[0]->num("cy"), p->num("data-y-top"), 0.01);

  History all_nan;
  all_nan.metrics["loss"] = {kNaN, kNaN};
  root = parse_xml(training_curves_svg(all_nan));
  EXPECT_EQ(texts(*panel(root, "loss"), "note"), std::vector<std::string>{"no finite values"});
}

TEST(Curves, EpochNumbersLrPanelAndEscaping) {
  History h;
  h.metrics["loss"] = {0.5, 0.4, 0.3};
  h.metrics["lr"] = {0.1, 0.1, 0.01};
  h.metrics["a<b&c"] = {1, 2, 3};
  h.epoch = {3, 4, 5};  // a resumed run
  const std::string svg = training_curves_svg(h);
  const Node root = parse_xml(svg);
  EXPECT_EQ(texts(*panel(root, "loss"), "xtick"), (std::vector<std::string>{"4", "5", "6"}));
  ASSERT_NE(panel(root, "lr"), nullptr);
  ASSERT_NE(panel(root, "a&lt;b&amp;c"), nullptr);  // the reader leaves entities as they are
  EXPECT_NE(svg.find(">a&lt;b&amp;c</text>"), std::string::npos);
}

TEST(Curves, WritesAtomicallyAndReportsErrors) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_curves_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "curves.svg").string();
  write_training_curves(four_epochs(), path);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), training_curves_svg(four_epochs()));

  expect_error([&] { write_training_curves(History{}, path); },
               {"[write_training_curves]", "empty", "test_curves.cpp"});
  History empty_series;
  empty_series.metrics["loss"] = {};
  expect_error([&] { training_curves_svg(empty_series); },
               {"[training_curves_svg]", "empty", "test_curves.cpp"});
  const std::string bad = (dir / "no/such/dir/curves.svg").string();
  expect_error([&] { write_training_curves(four_epochs(), bad); },
               {"[write_training_curves]", bad, "test_curves.cpp"});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln::train
