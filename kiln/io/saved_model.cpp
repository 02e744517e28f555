// Writing a saved-model bundle (Note [saved model]), and the format both sides share.
#include "kiln/io/saved_model.h"

#include <fmt/format.h>

#include <ctime>
#include <set>
#include <unordered_map>

#include "kiln/core/grad_mode.h"
#include "kiln/core/version.h"
#include "kiln/graph/serialize.h"
#include "kiln/io/safetensors.h"
#include "kiln/io/saved_model_format.h"
#include "kiln/nn/traced.h"

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

void save_model(const std::vector<ExportedFunction>& functions, const std::string& dir_in,
                const SaveModelOptions& options, const Loc& loc) {
  const char* op = "save_model";
  const std::string dir = normalize_dir_path(dir_in, format::layout(), op, loc);
  check_options(options, op, loc);
  if (functions.empty()) fail(op, loc, "no signatures to save into '{}'", dir);

  // Everything is serialized before the first file is touched: a failure here costs nothing.
  Variables variables;
  Json graphs = Json::object(), signatures = Json::object();
  for (const ExportedFunction& f : functions) {
    const std::string& sig = f.signature;
    if (sig.empty()) fail(op, loc, "a signature name is empty");
    if (signatures.contains(sig)) fail(op, loc, "the signature '{}' is given twice", sig);
    if (f.method.empty()) fail(op, loc, "the signature '{}' has an empty method", sig);
    const auto traced = f.function.graphs();
    if (traced.empty())
      fail(op, loc,
           "the function '{}' of signature '{}' has not been traced: make it with a signature "
           "(graph::function(fn, specs) or nn::function(model, specs)), which traces it at once",
           f.function.name(), sig);
    const graph::Graph& g = *traced.front();
    if (!f.output_names.empty() && f.output_names.size() != g.outputs.size())
      fail(op, loc, "the signature '{}' names {} outputs, but its graph '{}' returns {}", sig,
           f.output_names.size(), g.name, g.outputs.size());
    Json inputs = Json::array(), outputs = Json::array(), captures = Json::array();
    std::set<std::string> names;
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
          f.output_names.empty() ? fmt::format("output_{}", i) : f.output_names[i];
      if (name.empty()) fail(op, loc, "the signature '{}' has an empty output name", sig);
      outputs.push_back(format::tensor_info_json(info_of(g.value(g.outputs[i]), add_name(name))));
    }
    for (const graph::Capture& c : g.captures)
      captures.push_back(variables.key_for(c.tensor, g.value(c.value).name));
    graphs[sig] = graph::to_json(g);
    signatures[sig] = {
        {"method", f.method}, {"inputs", inputs}, {"outputs", outputs}, {"captures", captures}};
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

void save_model(nn::Module& model, const std::vector<graph::TensorSpec>& inputs,
                const std::string& dir, const SaveModelOptions& options, const Loc& loc) {
  std::vector<std::pair<nn::Module*, bool>> modes;
  for (const auto& [name, m] : model.named_modules()) modes.emplace_back(m, m->is_training());
  struct Restore {
    std::vector<std::pair<nn::Module*, bool>>& modes;
    ~Restore() {
      for (auto& [m, training] : modes) m->train(training);  // parents first: children last
    }
  } restore{modes};
  model.eval();
  NoGradGuard no_grad;
  graph::FunctionOptions fo;
  fo.name = model.type_name();
  fo.capture_name = nn::state_names(model);
  fo.on_retrace = graph::RetracePolicy::kSilent;
  const graph::Function f = nn::function(model, inputs, fo, loc);
  save_model({ExportedFunction{.signature = "serving_default", .function = f}}, dir, options, loc);
}

}  // namespace kiln::io
