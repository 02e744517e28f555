#pragma once
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "kiln/graph/function.h"
#include "kiln/graph/graph.h"
#include "kiln/graph/tensor_spec.h"
#include "kiln/io/manifest.h"
#include "kiln/nn/module.h"

namespace kiln::io {

// Note [saved model]
// ~~~~~~~~~~~~~~~~~~
// kiln's SavedModel: a directory that runs a trained model without the model's code.
//   saved_model.json       the manifest (Note [verified manifest]): format "kiln.saved_model",
//                          version, producer, creation time (UTC), precision, the user's
//                          metadata, the signatures, the asset names, and the size, CRC-32 and
//                          SHA-256 of every other file (Note [content hash]);
//   graphs.json            {"graphs": {SIGNATURE: graph document (Note [graph JSON])}};
//   variables.safetensors  every tensor a graph captures (parameters, buffers, constants), once,
//                          named as the model's state dict names it ("conv1.weight"), others
//                          "constant_N";
//   assets/                the user's files (class names, the data description of a run).
// A signature (serving_default and any others) is a graph with named inputs and outputs: each
// with a dtype and a shape whose symbolic dims are -1 with the symbol's name beside them
// ("batch"), as saved_model_cli shows them, a method ("predict"), and the variables the graph
// captures, in order.
// save_model writes the directory in one transaction (Note [directory transaction]): it exists
// complete or not at all, and a bundle it replaces stays readable until the new one is there.
// load_model never runs code and trusts nothing: every file's size and SHA-256 against the
// manifest (CRC-32 for a file recorded before kiln recorded hashes), graphs.json's nesting depth
// before it is parsed, every graph node through the op factory, every captured tensor's dtype and
// shape against the graph, every signature against its graph's inputs and outputs, and no variable
// left unused. A corrupt, truncated or hand-edited bundle is a kiln::Error naming the file and what
// is wrong.
constexpr int kSavedModelFormatVersion = 1;

// One input or output of a signature.
struct TensorInfo {
  std::string name;
  DType dtype = DType::Float32;
  graph::SymShape shape;
  bool operator==(const TensorInfo&) const = default;
  // "x: float32[-1 (batch), 1, 28, 28]"
  std::string describe() const;
};

struct SignatureDef {
  std::string name;                // "serving_default"
  std::string method = "predict";  // "train" for a training signature
  std::vector<TensorInfo> inputs;
  std::vector<TensorInfo> outputs;
  // A training signature's gradients: output name -> the variable it is the gradient of.
  std::vector<std::pair<std::string, std::string>> gradients = {};
};

// One signature to save: a function traced with a signature (graph::function(fn, specs), or
// nn::function(model, specs)); the bundle holds the graph it traced when it was made.
struct ExportedFunction {
  std::string signature = "serving_default";
  graph::Function function;
  std::vector<std::string> output_names = {};  // empty: "output_0", "output_1", ...
  std::string method = "predict";
  // Note [training signatures]: outputs that are the gradient of a captured tensor (output name,
  // the tensor); the loaded bundle's train_step accumulates them into those variables' .grad.
  std::vector<std::pair<std::string, Tensor>> gradients = {};
};

// Note [training signatures]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A bundle may hold a training step beside its inference graph (as a TF SavedModel may hold a
// "train" function), so that a loaded model can be fine-tuned without its code:
// training_function traces, in train mode, (inputs..., target) -> the loss (the model's
// regularization included) and the gradient of the loss with respect to every parameter that
// requires grad (Note [traced gradients]), named "loss" and "gradient/<parameter name>". Its
// graph shares the parameters with serving_default (one variable each) and computes batch-norm
// statistics and dropout as eager training does (Note [effects]). The loaded bundle's
// trainable_variables() are those parameters, as leaf tensors that require grad, so any kiln
// optimizer takes them; train_step(signature, inputs) runs the step and accumulates each
// gradient into its variable's .grad, as backward() would; optimizer.step() then updates the
// variables every signature captures, and save_model(loaded, dir) writes the fine-tuned bundle.
// The optimizer is the caller's (its state is not part of the bundle).

// The serving_default of save_model(model, inputs, dir): `model` in eval mode without gradients
// (its modes are restored afterwards), outputs "output_0", ...
ExportedFunction serving_function(nn::Module& model, const std::vector<graph::TensorSpec>& inputs,
                                  const Loc& loc = Loc::current());

using TrainingLoss = std::function<Tensor(const Tensor& output, const Tensor& target)>;
// A training signature (Note [training signatures]) called `signature`, method "train".
ExportedFunction training_function(nn::Module& model, TrainingLoss loss,
                                   const std::vector<graph::TensorSpec>& inputs,
                                   const graph::TensorSpec& target,
                                   const std::string& signature = "train",
                                   const Loc& loc = Loc::current());

// What a bundle records beside its signatures.
struct SaveModelOptions {
  // How the graphs compute: "float32", "bf16-autocast", "fp16-autocast" or "int8".
  std::string precision = "float32";
  // Files for assets/: name -> content. Names are plain file names (no '/', not "." or "..").
  std::map<std::string, std::string> assets = {};
  // The user's own (a JSON object): kept as given.
  nlohmann::json metadata = nlohmann::json::object();
};

// Writes a bundle of `functions` (signature names unique) at `dir`.
void save_model(const std::vector<ExportedFunction>& functions, const std::string& dir,
                const SaveModelOptions& options = {}, const Loc& loc = Loc::current());

// Writes a bundle whose serving_default is `model` in eval mode without gradients, traced with
// `inputs` (the model's mode is restored afterwards); its outputs are "output_0", ...
void save_model(nn::Module& model, const std::vector<graph::TensorSpec>& inputs,
                const std::string& dir, const SaveModelOptions& options = {},
                const Loc& loc = Loc::current());

// The manifest's facts about a bundle.
struct SavedModelInfo {
  int format_version = kSavedModelFormatVersion;
  std::string producer;  // "kiln 0.1.0"
  std::string created;   // "2026-12-07T10:00:00Z"
  std::string precision;
  nlohmann::json metadata;
  std::vector<FileRecord> files;  // every file but the manifest (assets included)
};

// A loaded bundle: callable by signature. Calls are checked against the signature (count, dtype,
// rank, static dims, consistent symbols), run on planned memory (each graph has its memory
// planner, Note [memory planner]) and may run on several threads at once.
class SavedModel {
 public:
  const std::string& dir() const;
  const SavedModelInfo& info() const;
  const std::vector<SignatureDef>& signatures() const;
  // The signature called `name`; an error lists the bundle's signatures.
  const SignatureDef& signature(const std::string& name, const Loc& loc = Loc::current()) const;
  const graph::Graph& graph(const std::string& signature, const Loc& loc = Loc::current()) const;

  std::vector<Tensor> run(const std::string& signature, const std::vector<Tensor>& inputs,
                          const Loc& loc = Loc::current()) const;
  // Inputs by name (every input of the signature exactly once); outputs by name.
  std::vector<std::pair<std::string, Tensor>> run_named(
      const std::string& signature, const std::vector<std::pair<std::string, Tensor>>& inputs,
      const Loc& loc = Loc::current()) const;
  // serving_default.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs,
                                 const Loc& loc = Loc::current()) const {
    return run("serving_default", inputs, loc);
  }

  // Every variable the graphs capture, by name: the live tensors, shared by every signature.
  const std::vector<std::pair<std::string, Tensor>>& variables() const;
  // The variables a training signature has gradients for (Note [training signatures]): leaf
  // tensors that require grad, for an optimizer.
  std::vector<Tensor> trainable_variables() const;
  // Runs the training signature `signature` and accumulates its gradients into the trainable
  // variables' .grad; returns the loss (its "loss" output, or its first).
  Tensor train_step(const std::string& signature, const std::vector<Tensor>& inputs,
                    const Loc& loc = Loc::current()) const;

  std::vector<std::string> asset_names() const;
  // The content of assets/`name`; an error lists the assets.
  const std::string& asset(const std::string& name, const Loc& loc = Loc::current()) const;

  struct State;
  explicit SavedModel(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  const State& state() const { return *state_; }

 private:
  std::shared_ptr<const State> state_;
};

SavedModel load_model(const std::string& dir, const Loc& loc = Loc::current());

// Writes `model`'s graphs, signatures, assets and metadata with its variables as they are now (a
// fine-tuned bundle; Note [training signatures]) as a new bundle at `dir`.
void save_model(const SavedModel& model, const std::string& dir, const Loc& loc = Loc::current());

}  // namespace kiln::io
