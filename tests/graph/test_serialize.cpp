// A graph's JSON document (Note [graph JSON]): an exact round trip, and a clear error for every
// kind of bad document.
#include <gtest/gtest.h>

#include "kiln/graph/executor.h"
#include "kiln/graph/serialize.h"
#include "kiln/graph/tracer.h"
#include "kiln/kiln.h"
#include "tests/support/test_util.h"

namespace kiln::graph {
namespace {

struct Traced {
  Graph graph;
  Tensor w;
};

Traced small_graph() {
  Traced t{Graph{}, randn({4, 3})};
  Tracer tracer("small");
  Tensor x = tracer.add_input(TensorSpec({"batch", 3}, DType::Float32, "x"), 5);
  tracer.start();
  Tensor y = softmax(linear(x, t.w), 1);
  t.graph = tracer.finish({y});
  return t;
}

TEST(GraphJson, RoundTripIsExactAndTheLoadedGraphRuns) {
  Traced t = small_graph();
  const nlohmann::json doc = to_json(t.graph);
  EXPECT_EQ(doc["format"], "kiln.graph");
  EXPECT_EQ(doc["version"], kGraphFormatVersionWithoutSymAttrs);
  EXPECT_EQ(doc["values"][0]["shape"][0], (nlohmann::json{{"symbol", "batch"}, {"traced", 5}}));
  const Graph loaded = from_json(nlohmann::json::parse(doc.dump(2)), {t.w});
  EXPECT_EQ(to_json(loaded), doc);
  EXPECT_EQ(to_text(loaded), to_text(t.graph));
  EXPECT_FALSE(loaded.nodes[0].loc.has_value()) << "a loaded node keeps its line as text only";
  Tensor x = randn({2, 3});
  test::expect_bit_identical(run(loaded, {x})[0], run(t.graph, {x})[0]);
}

TEST(GraphJson, ALoadedGraphsRunTimeErrorStillNamesTheTracedLine) {
  Tensor w = randn({4, 3});
  Tracer tracer("g");
  Tensor x = tracer.add_input(TensorSpec({4}), 1);
  Tensor index = tracer.add_input(TensorSpec({2}, DType::Int64), 1);
  tracer.start();
  const int line = __LINE__ + 1;
  Tensor y = gather(x, 0, index);
  const Graph g = tracer.finish({y});
  const Graph loaded = from_json(to_json(g), {});
  test::expect_error(
      [&] {
        run(loaded, {randn({4}), tensor({0, 7}, {DType::Int64})});
      },
      {"[gather]",
       "in graph 'g', node 0 'gather', traced at test_serialize.cpp:" + std::to_string(line)});
}

// Each corruption of a good document, and a piece of the error it must give.
TEST(GraphJson, BadDocumentsAreErrorsNamingWhatIsWrong) {
  Traced t = small_graph();
  const nlohmann::json good = to_json(t.graph);
  struct Bad {
    std::function<void(nlohmann::json&)> corrupt;
    std::string expect;
  };
  const std::vector<Bad> cases = {
      {[](nlohmann::json& d) { d = nlohmann::json::array(); }, "the document is not an object"},
      {[](nlohmann::json& d) { d["format"] = "onnx"; }, "\"format\" is not \"kiln.graph\""},
      {[](nlohmann::json& d) { d["version"] = 3; },
       "version 3 is not supported (this kiln reads versions 1 and 2)"},
      {[](nlohmann::json& d) { d.erase("nodes"); }, "the document has no \"nodes\""},
      {[](nlohmann::json& d) { d["values"][0]["dtype"] = "float7"; },
       "values[0].dtype names no dtype: \"float7\""},
      {[](nlohmann::json& d) { d["values"][0]["shape"][1] = -3; },
       "values[0].shape[1] is a negative size"},
      {[](nlohmann::json& d) { d["nodes"][0]["op"] = "no_such_op"; }, "nodes[0] ('no_such_op')"},
      {[](nlohmann::json& d) { d["nodes"][0]["attrs"] = nlohmann::json::object(); },
       "nodes[0] ('linear')"},
      {[](nlohmann::json& d) { d["nodes"][0]["inputs"][0] = 99; },
       "reads %99, which is not a value"},
      {[](nlohmann::json& d) { d["nodes"][0]["inputs"][0] = 2; }, "reads %2 before it is defined"},
      {[](nlohmann::json& d) { d["nodes"][1]["outputs"][0] = 0; }, "defines %0 a second time"},
      {[](nlohmann::json& d) { d["nodes"][0]["inputs"] = "x"; }, "nodes[0].inputs is not an array"},
      {[](nlohmann::json& d) {
         d["nodes"][0]["inputs"].push_back(0);
         d["nodes"][0]["inputs"].push_back(0);
       },
       "has 4 inputs, but the op takes"},
      {[](nlohmann::json& d) { d["outputs"][0] = 42; }, "output %42 is not defined"},
      {[](nlohmann::json& d) {
         d["captures"].push_back({{"value", 0}});
       },
       "the graph captures 2 tensors, but 1 were given"},
      {[](nlohmann::json& d) { d["nodes"][0]["line"] = "12"; }, "nodes[0].line is not an integer"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + cases[i].expect);
    nlohmann::json doc = good;
    cases[i].corrupt(doc);
    test::expect_error([&] { from_json(doc, {t.w}); }, {"[graph]", cases[i].expect});
  }
  test::expect_error(
      [&] {
        from_json(good, {randn({4, 2})});
      },
      {"captures[0] (%1) is float32[4, 3], but the tensor given is", "[4, 2]"});
  test::expect_error([&] { from_json(good, {Tensor()}); },
                     {"the tensor given for captures[0] is undefined"});
}

}  // namespace
}  // namespace kiln::graph
