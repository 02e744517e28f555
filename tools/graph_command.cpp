// `kiln graph`: traces a zoo model with a symbolic batch and writes its graph as text, JSON, DOT
// and (where Graphviz's `dot` is installed) SVG.
#include <filesystem>
#include <iostream>
#include <optional>

#include "kiln/io/atomic_file.h"
#include "kiln/kiln.h"
#include "tools/datasets.h"
#include "tools/train_command.h"

namespace kiln::cli {

namespace {

// Atomic, so a failed run never leaves half a file.
void write_text(const std::filesystem::path& path, const std::string& text) {
  io::write_file_atomic(path.string(), {reinterpret_cast<const uint8_t*>(text.data()), text.size()},
                        "kiln graph");
}

}  // namespace

int run_graph(const GraphArgs& args) {
  const DataInfo info = data_info(args.data);
  auto model = nn::make_model(args.model, info.channels, info.image_size, info.classes());
  model->train(args.mode == "train");
  graph::FunctionOptions options;
  options.name = args.model;
  options.optimize = args.optimize;
  options.passes.freeze = args.freeze;
  options.passes.skip = args.skip_passes;
  if (args.freeze && !args.optimize)
    throw Error("[kiln graph] --freeze folds constants, which is a pass: drop --no-optimize");
  if (args.freeze && args.mode == "train")
    throw Error(
        "[kiln graph] --freeze is for inference graphs: a training graph updates its "
        "parameters, so they are not constants (use --mode eval)");
  // An eval-mode graph is an inference graph: traced without recording gradients (conv + batch
  // norm then fuse into conv2d_affine, as an inference call runs). A train-mode graph records.
  std::optional<NoGradGuard> no_grad;
  if (args.mode == "eval") no_grad.emplace();
  graph::Function f =
      nn::function(model,
                   {graph::TensorSpec({"batch", info.channels, info.image_size, info.image_size},
                                      DType::Float32, "x")},
                   options);
  const graph::Graph& g = *f.graphs().at(0);
  const std::filesystem::path dir(args.out);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("[kiln graph] cannot create " + dir.string() + ": " + ec.message());
  write_text(dir / "graph.txt", graph::to_text(g));
  write_text(dir / "graph.json", graph::to_json(g).dump(1) + "\n");
  write_text(dir / "graph.dot", graph::to_dot(g));
  std::cout << fmt::format("{} ({} mode) on {}x{}x{} inputs: {} nodes, {} captures\n", args.model,
                           args.mode, info.channels, info.image_size, info.image_size,
                           g.nodes.size(), g.captures.size());
  const graph::FunctionStats stats = f.stats();
  if (!stats.optimizations.empty())
    std::cout << "optimized: " << stats.optimizations[0].format() << "\n";
  std::cout << "wrote " << (dir / "graph.txt").string() << ", graph.json, graph.dot";
  const std::string why =
      graph::render_svg((dir / "graph.dot").string(), (dir / "graph.svg").string());
  if (why.empty()) {
    std::cout << ", graph.svg\n";
  } else {
    std::cout << "\n";
    std::cerr << "kiln graph: no SVG: " << why << "\n";
  }
  return 0;
}

}  // namespace kiln::cli
