// Writing a saved-model bundle (Note [saved model]), and the format both sides share.
#include "kiln/io/saved_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <set>
#include <unordered_map>

#include "kiln/autograd/engine.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/version.h"
#include "kiln/graph/serialize.h"
#include "kiln/io/safetensors.h"
#include "kiln/io/saved_model_format.h"
#include "kiln/nn/traced.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"

namespace kiln::io {

namespace saved_model_format {

const DirLayout& layout() {
  static const DirLayout l{
      "saved model", {kManifestFile, kGraphsFile, kVariablesFile}, kManifestFile, {kAssetsFolder}};
  return l;
}

const ManifestFormat& manifest_format() {
  static const ManifestFormat f{
      .format = "kiln.saved_model", .version = kSavedModelFormatVersion, .kind = "saved model"};
  return f;
}

bool is_known_precision(std::string_view precision) {
  return precision == "float32" || precision == "bf16-autocast" || precision == "fp16-autocast" ||
         precision == "int8";
}

const char* known_precisions() {
  return "float32, bf16-autocast, fp16-autocast, int8";
}

bool is_plain_file_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

nlohmann::json tensor_info_json(const TensorInfo& info) {
  nlohmann::json shape = nlohmann::json::array(), dims = nlohmann::json::array();
  for (const graph::Dim& d : info.shape) {
    shape.push_back(d.is_symbolic() ? int64_t{-1} : d.size);
    dims.push_back(d.symbol);
  }
  return {{"name", info.name}, {"dtype", dtype_name(info.dtype)}, {"shape", shape}, {"dims", dims}};
}

}  // namespace saved_model_format

namespace {

namespace format = saved_model_format;
using Json = nlohmann::json;

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// The bundle's variables: every captured tensor once (by identity), under a unique name.
class Variables {
 public:
  const std::string& key_for(const Tensor& t, const std::string& value_name) {
    if (auto it = keys_.find(t.impl()); it != keys_.end()) return it->second;
    std::string key = value_name;
    if (key.empty() || taken_.count(key)) {
      const std::string stem = key.empty() ? "constant" : key;
      do key = fmt::format("{}_{}", stem, next_++);
      while (taken_.count(key));
    }
    taken_.insert(key);
    tensors_.emplace_back(key, t);
    return keys_.emplace(t.impl(), key).first->second;
  }
  const std::vector<std::pair<std::string, Tensor>>& tensors() const { return tensors_; }

 private:
  std::unordered_map<const TensorImpl*, std::string> keys_;
  std::set<std::string> taken_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
  int next_ = 0;
};

// A value as a signature shows it: a symbolic dim's traced size is no part of it (-1).
TensorInfo info_of(const graph::Value& v, std::string name) {
  TensorInfo info{std::move(name), v.dtype, v.shape};
  for (graph::Dim& d : info.shape)
    if (d.is_symbolic()) d.size = -1;
  return info;
}

void check_options(const SaveModelOptions& options, const char* op, const Loc& loc) {
  if (!format::is_known_precision(options.precision))
    fail(op, loc, "unknown precision '{}': expected one of {}", options.precision,
         format::known_precisions());
  if (!options.metadata.is_object())
    fail(op, loc, "expected the metadata to be a JSON object, but got {}",
         options.metadata.type_name());
  for (const auto& [name, content] : options.assets)
    if (!format::is_plain_file_name(name))
      fail(op, loc,
           "the asset name '{}' is not a plain file name (assets/ holds files, not folders; no "
           "'/', '.' or '..')",
           name);
}

}  // namespace

std::string TensorInfo::describe() const {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) dims += ", ";
    dims += shape[i].is_symbolic() ? "-1 (" + shape[i].symbol + ")" : std::to_string(shape[i].size);
  }
  return fmt::format("{}: {}[{}]", name, dtype_name(dtype), dims);
}

namespace {

// One signature to write: its graph, output names and gradients (output -> captured tensor).
struct Entry {
  std::string signature, method;
  const graph::Graph* graph = nullptr;
  std::vector<std::string> output_names;  // empty: "output_0", ...
  std::vector<std::pair<std::string, Tensor>> gradients;
};

void write_bundle(const std::vector<Entry>& entries, const std::string& dir_in,
                  const SaveModelOptions& options, const char* op, const Loc& loc) {
  const std::string dir = normalize_dir_path(dir_in, format::layout(), op, loc);
  check_options(options, op, loc);
  if (entries.empty()) fail(op, loc, "no signatures to save into '{}'", dir);

  // Everything is serialized before the first file is touched: a failure here costs nothing.
  Variables variables;
  Json graphs = Json::object(), signatures = Json::object();
  for (const Entry& e : entries) {
    const std::string& sig = e.signature;
    const graph::Graph& g = *e.graph;
    if (sig.empty()) fail(op, loc, "a signature name is empty");
    if (signatures.contains(sig)) fail(op, loc, "the signature '{}' is given twice", sig);
    if (e.method.empty()) fail(op, loc, "the signature '{}' has an empty method", sig);
    if (!e.output_names.empty() && e.output_names.size() != g.outputs.size())
      fail(op, loc, "the signature '{}' names {} outputs, but its graph '{}' returns {}", sig,
           e.output_names.size(), g.name, g.outputs.size());
    Json inputs = Json::array(), outputs = Json::array(), captures = Json::array();
    std::set<std::string> names, output_names;
    auto add_name = [&](const std::string& name) {
      if (!names.insert(name).second)
        fail(op, loc, "the signature '{}' has two inputs or outputs called '{}'", sig, name);
      return name;
    };
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      const graph::Value& v = g.value(g.inputs[i]);
      const std::string name = v.name.empty() ? fmt::format("input_{}", i) : v.name;
      inputs.push_back(format::tensor_info_json(info_of(v, add_name(name))));
    }
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      const std::string name =
          e.output_names.empty() ? fmt::format("output_{}", i) : e.output_names[i];
      if (name.empty()) fail(op, loc, "the signature '{}' has an empty output name", sig);
      outputs.push_back(format::tensor_info_json(info_of(g.value(g.outputs[i]), add_name(name))));
      output_names.insert(name);
    }
    for (const graph::Capture& c : g.captures)
      captures.push_back(variables.key_for(c.tensor, g.value(c.value).name));
    Json gradients = Json::object();
    for (const auto& [output, tensor] : e.gradients) {
      if (!output_names.count(output))
        fail(op, loc, "the signature '{}' has no output '{}' to be a gradient", sig, output);
      auto it = std::find_if(g.captures.begin(), g.captures.end(),
                             [&](const graph::Capture& c) { return c.tensor.is_same(tensor); });
      if (it == g.captures.end())
        fail(op, loc,
             "the output '{}' of signature '{}' is the gradient of a tensor its graph does not "
             "capture",
             output, sig);
      gradients[output] = variables.key_for(it->tensor, g.value(it->value).name);
    }
    graphs[sig] = graph::to_json(g);
    signatures[sig] = {
        {"method", e.method}, {"inputs", inputs}, {"outputs", outputs}, {"captures", captures}};
    if (!gradients.empty()) signatures[sig]["gradients"] = gradients;
  }
  const std::vector<uint8_t> variable_bytes =
      serialize_safetensors(variables.tensors(), {{"format", "kiln.saved_model"}}, loc);
  std::string graph_text;
  try {
    graph_text = Json{{"graphs", graphs}}.dump();
  } catch (const Json::exception& e) {  // a name that is not UTF-8
    fail(op, loc, "cannot write the graphs of '{}': {}", dir, e.what());
  }

  Json files = {{format::kGraphsFile, file_record_json(bytes_of(graph_text))},
                {format::kVariablesFile, file_record_json(variable_bytes)}};
  Json assets = Json::array();
  for (const auto& [name, content] : options.assets) {
    assets.push_back(name);
    files[std::string(format::kAssetsFolder) + "/" + name] = file_record_json(bytes_of(content));
  }
  const Json content = {{"producer", std::string("kiln ") + kVersion},
                        {"created", utc_now()},
                        {"precision", options.precision},
                        {"metadata", options.metadata},
                        {"signatures", signatures},
                        {"assets", assets},
                        {"files", files}};
  const std::string manifest = seal_manifest(content, format::manifest_format(), dir, op, loc);

  DirTransaction transaction(dir, format::layout(), op, loc);
  transaction.write(format::kGraphsFile, bytes_of(graph_text));
  transaction.write(format::kVariablesFile, variable_bytes);
  for (const auto& [name, content_text] : options.assets)
    transaction.write(std::string(format::kAssetsFolder) + "/" + name, bytes_of(content_text));
  transaction.write(format::kManifestFile, bytes_of(manifest));
  transaction.commit();
}

// Restores every module's train/eval mode when it dies.
class ModeRestore {
 public:
  explicit ModeRestore(nn::Module& model) {
    for (const auto& [name, m] : model.named_modules()) modes_.emplace_back(m, m->is_training());
  }
  ~ModeRestore() {
    for (auto& [m, training] : modes_) m->train(training);  // parents first: children last
  }
  ModeRestore(const ModeRestore&) = delete;
  ModeRestore& operator=(const ModeRestore&) = delete;

 private:
  std::vector<std::pair<nn::Module*, bool>> modes_;
};

}  // namespace

void save_model(const std::vector<ExportedFunction>& functions, const std::string& dir,
                const SaveModelOptions& options, const Loc& loc) {
  const char* op = "save_model";
  std::vector<std::shared_ptr<const graph::Graph>> keep;
  std::vector<Entry> entries;
  for (const ExportedFunction& f : functions) {
    const auto traced = f.function.graphs();
    if (traced.empty())
      fail(op, loc,
           "the function '{}' of signature '{}' has not been traced: make it with a signature "
           "(graph::function(fn, specs) or nn::function(model, specs)), which traces it at once",
           f.function.name(), f.signature);
    keep.push_back(traced.front());
    entries.push_back({f.signature, f.method, traced.front().get(), f.output_names, f.gradients});
  }
  write_bundle(entries, dir, options, op, loc);
}

void save_model(const SavedModel& model, const std::string& dir, const Loc& loc) {
  const SavedModel::State& state = model.state();
  std::vector<Entry> entries;
  for (const SignatureDef& s : state.signatures) {
    Entry e{s.name, s.method, &state.graphs.at(s.name), {}, {}};
    for (const TensorInfo& t : s.outputs) e.output_names.push_back(t.name);
    for (const auto& [output, variable] : s.gradients) {
      auto it = std::find_if(state.variables.begin(), state.variables.end(),
                             [&](const auto& v) { return v.first == variable; });
      e.gradients.emplace_back(output, it->second);
    }
    entries.push_back(std::move(e));
  }
  SaveModelOptions options{
      .precision = state.info.precision, .assets = state.assets, .metadata = state.info.metadata};
  write_bundle(entries, dir, options, "save_model", loc);
}

ExportedFunction serving_function(nn::Module& model, const std::vector<graph::TensorSpec>& inputs,
                                  const Loc& loc) {
  ModeRestore restore(model);
  model.eval();
  NoGradGuard no_grad;
  graph::FunctionOptions fo;
  fo.name = model.type_name();
  fo.capture_name = nn::state_names(model);
  fo.on_retrace = graph::RetracePolicy::kSilent;
  return ExportedFunction{.signature = "serving_default",
                          .function = nn::function(model, inputs, fo, loc)};
}

ExportedFunction training_function(nn::Module& model, TrainingLoss loss,
                                   const std::vector<graph::TensorSpec>& inputs,
                                   const graph::TensorSpec& target, const std::string& signature,
                                   const Loc& loc) {
  const char* op = "training_function";
  if (!loss) fail(op, loc, "no loss function given");
  if (inputs.empty()) fail(op, loc, "the model needs at least one input spec");
  std::vector<Tensor> params;
  std::vector<std::string> names = {"loss"};
  const auto state_name = nn::state_names(model);
  for (const Tensor& p : model.parameters())
    if (p.requires_grad()) {
      params.push_back(p);
      names.push_back("gradient/" + state_name(p));
    }
  if (params.empty()) fail(op, loc, "the model has no parameter that requires grad");
  ModeRestore restore(model);
  model.train();
  EnableGradGuard grad_mode;
  graph::FunctionOptions fo;
  fo.name = model.type_name() + "_train_step";
  fo.capture_name = state_name;
  fo.on_retrace = graph::RetracePolicy::kSilent;
  fo.record_tape = false;  // the graph computes its own gradients
  std::vector<graph::TensorSpec> specs = inputs;
  specs.push_back(target);
  const size_t n_inputs = inputs.size();
  nn::Module* m = &model;
  graph::Function f = graph::function(
      [m, loss, params, n_inputs](const std::vector<Tensor>& in) {
        const std::vector<Tensor> args(in.begin(), in.begin() + static_cast<long>(n_inputs));
        const Tensor out = (*m)(args)[0];
        Tensor total = loss(out, in[n_inputs]);
        const Tensor penalty = m->regularization_loss();
        if (penalty.defined()) total = add(total, penalty);
        std::vector<Tensor> grads = kiln::grad({total}, params, {}, /*retain_graph=*/false,
                                               /*create_graph=*/false, /*allow_unused=*/true);
        std::vector<Tensor> result = {total};
        for (size_t i = 0; i < grads.size(); ++i)
          result.push_back(grads[i].defined() ? grads[i] : zeros_like(params[i]));
        return result;
      },
      specs, fo, loc);
  ExportedFunction e{
      .signature = signature, .function = f, .output_names = names, .method = "train"};
  for (size_t i = 0; i < params.size(); ++i) e.gradients.emplace_back(names[i + 1], params[i]);
  return e;
}

void save_model(nn::Module& model, const std::vector<graph::TensorSpec>& inputs,
                const std::string& dir, const SaveModelOptions& options, const Loc& loc) {
  save_model({serving_function(model, inputs, loc)}, dir, options, loc);
}

}  // namespace kiln::io
