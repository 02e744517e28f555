// Loading a saved-model bundle (Note [saved model]) and running its signatures.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "kiln/core/grad_mode.h"
#include "kiln/graph/executor.h"
#include "kiln/graph/serialize.h"
#include "kiln/io/safetensors.h"
#include "kiln/io/saved_model.h"
#include "kiln/io/saved_model_format.h"
#include "kiln/ops/binary.h"

namespace kiln::io {

namespace format = saved_model_format;
using Json = nlohmann::json;

namespace {

constexpr const char* kOp = "load_model";

// A wrapped error already carries the caller's location; keep it once.
std::string without_location(const std::string& message) {
  const size_t at = message.rfind(" — at ");
  return at == std::string::npos ? message : message.substr(0, at);
}

class Reader {
 public:
  Reader(const Manifest& m, std::string dir) : m_(m), dir_(std::move(dir)) {}

  std::string text(const Json& obj, const char* key, const std::string& where) const {
    const Json& v = m_.field(obj, key, where.c_str());
    if (!v.is_string())
      m_.error("expected {} \"{}\" to be a string, but got {}", where, key, v.dump());
    return v.get<std::string>();
  }
  const Json& array(const Json& obj, const char* key, const std::string& where) const {
    const Json& v = m_.field(obj, key, where.c_str());
    if (!v.is_array())
      m_.error("expected {} \"{}\" to be an array, but got {}", where, key, v.dump());
    return v;
  }

  TensorInfo tensor_info(const Json& j, const std::string& where) const {
    if (!j.is_object()) m_.error("expected {} to be an object, but got {}", where, j.dump());
    TensorInfo info;
    info.name = text(j, "name", where);
    const std::string dtype = text(j, "dtype", where);
    const std::optional<DType> dt = dtype_from_name(dtype);
    if (!dt) m_.error("{} names no dtype: \"{}\"", where, dtype);
    info.dtype = *dt;
    const Json& shape = array(j, "shape", where);
    const Json& dims = array(j, "dims", where);
    if (dims.size() != shape.size())
      m_.error("{} has {} \"dims\" for {} \"shape\" entries", where, dims.size(), shape.size());
    for (size_t i = 0; i < shape.size(); ++i) {
      if (!shape[i].is_number_integer() || !dims[i].is_string())
        m_.error("{} dim {}: expected an integer size and a symbol name, but got {} and {}", where,
                 i, shape[i].dump(), dims[i].dump());
      const int64_t size = shape[i].get<int64_t>();
      const std::string symbol = dims[i].get<std::string>();
      if (symbol.empty() ? size < 0 : size != -1)
        m_.error(
            "{} dim {}: a static dim is a size >= 0 and a symbolic one is -1 with a name, but "
            "got {} and \"{}\"",
            where, i, size, symbol);
      info.shape.push_back(graph::Dim{symbol.empty() ? size : -1, symbol});
    }
    return info;
  }

  std::vector<uint8_t> file(const std::string& name) const {
    return m_.read_file(dir_, m_.file_record(name));
  }

 private:
  const Manifest& m_;
  std::string dir_;
};

// Whether a graph value fits a signature entry: dtype, rank, static sizes, symbol names.
bool fits(const TensorInfo& info, const graph::Value& v) {
  if (info.dtype != v.dtype || info.shape.size() != v.shape.size()) return false;
  for (size_t i = 0; i < v.shape.size(); ++i) {
    const graph::Dim& d = v.shape[i];
    if (d.is_symbolic() ? d.symbol != info.shape[i].symbol
                        : info.shape[i].is_symbolic() || d.size != info.shape[i].size)
      return false;
  }
  return true;
}

std::string value_text(const graph::Value& v) {
  return fmt::format("{}{}", dtype_name(v.dtype), graph::format_shape(v.shape));
}

}  // namespace

SavedModel load_model(const std::string& dir_in, const Loc& loc) {
  const std::string dir = resolve_committed_dir(dir_in, format::layout(), kOp, loc);
  const std::string manifest_path = dir + "/" + format::kManifestFile;
  const Manifest m = Manifest::read(manifest_path, format::manifest_format(), kOp, loc);
  const Reader r(m, dir);
  const Json& j = m.json();
  auto state = std::make_shared<SavedModel::State>();
  state->dir = dir;
  SavedModelInfo& info = state->info;
  info.producer = r.text(j, "producer", "the saved model");
  info.created = r.text(j, "created", "the saved model");
  info.precision = r.text(j, "precision", "the saved model");
  if (!format::is_known_precision(info.precision))
    m.error("unknown precision \"{}\": expected one of {}", info.precision,
            format::known_precisions());
  info.metadata = m.field(j, "metadata", "the saved model");
  if (!info.metadata.is_object()) m.error("expected \"metadata\" to be an object");

  // Every listed file must be one the format knows; each is checked when it is read.
  const Json& files = m.field(j, "files", "the saved model");
  if (!files.is_object()) m.error("expected \"files\" to be an object");
  const Json& assets = r.array(j, "assets", "the saved model");
  std::set<std::string> expected = {format::kGraphsFile, format::kVariablesFile};
  for (const Json& a : assets) {
    if (!a.is_string() || !format::is_plain_file_name(a.get<std::string>()))
      m.error("\"assets\" holds {}, which is not a plain file name", a.dump());
    if (!expected.insert(std::string(format::kAssetsFolder) + "/" + a.get<std::string>()).second)
      m.error("\"assets\" names {} twice", a.dump());
  }
  for (const auto& item : files.items()) {
    const std::string& name = item.key();
    if (!expected.count(name))
      m.error("\"files\" lists '{}', which is no part of a saved model with these assets", name);
    info.files.push_back(m.file_record(name));
  }

  // The graphs: nesting bounded before nlohmann's recursive parser sees them.
  const std::string graphs_path = dir + "/" + format::kGraphsFile;
  const std::vector<uint8_t> graph_bytes = r.file(format::kGraphsFile);
  if (const size_t depth = json_nesting_depth(graph_bytes); depth > format::kMaxGraphDepth)
    fail(kOp, loc, "'{}': nested {} levels deep, more than the {} levels allowed", graphs_path,
         depth, format::kMaxGraphDepth);
  Json graphs_doc;
  try {
    graphs_doc = Json::parse(graph_bytes.begin(), graph_bytes.end());
  } catch (const Json::parse_error& e) {
    fail(kOp, loc, "'{}' is not valid JSON (at byte {}): {}", graphs_path, e.byte, e.what());
  }
  if (!graphs_doc.is_object() || !graphs_doc.contains("graphs") ||
      !graphs_doc["graphs"].is_object())
    fail(kOp, loc, "'{}' holds no {{\"graphs\": {{...}}}} object", graphs_path);
  const Json& graphs = graphs_doc["graphs"];

  const std::string variables_path = dir + "/" + format::kVariablesFile;
  const SafetensorsFile variables =
      parse_safetensors(r.file(format::kVariablesFile), variables_path, loc);
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : variables.tensors) by_name.emplace(name, &t);
  std::set<std::string> used, trainable;
  std::vector<std::string> trainable_order;

  const Json& signatures = m.field(j, "signatures", "the saved model");
  if (!signatures.is_object() || signatures.empty())
    m.error("expected \"signatures\" to be an object with at least one signature");
  for (const auto& [name, s] : signatures.items()) {
    const std::string where = "signature '" + name + "'";
    if (!s.is_object()) m.error("expected {} to be an object", where);
    SignatureDef sig;
    sig.name = name;
    sig.method = r.text(s, "method", where);
    for (const Json& t : r.array(s, "inputs", where))
      sig.inputs.push_back(r.tensor_info(t, where + " input " + std::to_string(sig.inputs.size())));
    for (const Json& t : r.array(s, "outputs", where))
      sig.outputs.push_back(
          r.tensor_info(t, where + " output " + std::to_string(sig.outputs.size())));
    std::vector<Tensor> captures;
    std::vector<std::string> captures_of;
    for (const Json& c : r.array(s, "captures", where)) {
      if (!c.is_string()) m.error("{} \"captures\" holds {}, not a variable name", where, c.dump());
      auto it = by_name.find(c.get<std::string>());
      if (it == by_name.end())
        fail(kOp, loc, "'{}': {} captures the variable '{}', which '{}' does not hold",
             manifest_path, where, c.get<std::string>(), variables_path);
      captures.push_back(*it->second);
      captures_of.push_back(it->first);
      used.insert(it->first);
    }
    if (!graphs.contains(name)) fail(kOp, loc, "'{}' has no graph for the {}", graphs_path, where);
    graph::Graph g;
    try {
      g = graph::from_json(graphs[name], captures);
    } catch (const Error& e) {
      fail(kOp, loc, "'{}': the graph of {}: {}", graphs_path, where, without_location(e.what()));
    } catch (const Json::exception& e) {
      fail(kOp, loc, "'{}': the graph of {}: {}", graphs_path, where, e.what());
    }
    // The signature must describe its graph, or a call checked against one would run the other.
    if (sig.inputs.size() != g.inputs.size() || sig.outputs.size() != g.outputs.size())
      m.error("{} has {} inputs and {} outputs, but its graph has {} and {}", where,
              sig.inputs.size(), sig.outputs.size(), g.inputs.size(), g.outputs.size());
    std::set<std::string> names;
    auto check = [&](const TensorInfo& t, int value, const char* kind, size_t i) {
      const graph::Value& v = g.value(value);
      if (!fits(t, v))
        m.error("{} {} {} is {}, but its graph's is {}", where, kind, i, t.describe(),
                value_text(v));
      if (!names.insert(t.name).second || t.name.empty())
        m.error("{} {} {}: the name '{}' is empty or used twice", where, kind, i, t.name);
    };
    for (size_t i = 0; i < g.inputs.size(); ++i) check(sig.inputs[i], g.inputs[i], "input", i);
    for (size_t i = 0; i < g.outputs.size(); ++i) check(sig.outputs[i], g.outputs[i], "output", i);
    // Note [training signatures]: each gradient is an output of its variable's dtype and shape,
    // of a variable this signature captures (format version 1 bundles may have none).
    if (s.contains("gradients")) {
      const Json& grads = s["gradients"];
      if (!grads.is_object()) m.error("expected {} \"gradients\" to be an object", where);
      for (const auto& [output, variable] : grads.items()) {
        if (!variable.is_string())
          m.error("{} gradient '{}': expected a variable name, but got {}", where, output,
                  variable.dump());
        const std::string var = variable.get<std::string>();
        auto out = std::find_if(sig.outputs.begin(), sig.outputs.end(),
                                [&](const TensorInfo& t) { return t.name == output; });
        if (out == sig.outputs.end())
          m.error("{} lists the gradient '{}', which is none of its outputs", where, output);
        auto captured = std::find(captures_of.begin(), captures_of.end(), var);
        if (captured == captures_of.end())
          m.error("{} gradient '{}' is of '{}', which the signature does not capture", where,
                  output, var);
        const Tensor& t = *by_name.at(var);
        const graph::Value& v = g.value(g.outputs[static_cast<size_t>(out - sig.outputs.begin())]);
        bool same = v.dtype == t.dtype() && v.shape.size() == t.shape().size();
        for (size_t d = 0; same && d < v.shape.size(); ++d)
          same = !v.shape[d].is_symbolic() && v.shape[d].size == t.shape()[d];
        if (!same)
          m.error("{} gradient '{}' is {}, but the variable '{}' is {}[{}]", where, output,
                  value_text(v), var, dtype_name(t.dtype()), fmt::join(t.shape(), ", "));
        sig.gradients.emplace_back(output, var);
      }
      // In the order of the outputs (the model's parameters, for training_function).
      auto index = [&](const std::string& output) {
        return std::find_if(sig.outputs.begin(), sig.outputs.end(),
                            [&](const TensorInfo& t) { return t.name == output; }) -
               sig.outputs.begin();
      };
      std::sort(sig.gradients.begin(), sig.gradients.end(),
                [&](const auto& a, const auto& b) { return index(a.first) < index(b.first); });
      for (const auto& [output, var] : sig.gradients)
        if (trainable.insert(var).second) trainable_order.push_back(var);
    }
    state->graphs.emplace(name, std::move(g));
    state->planners.emplace(name, std::make_shared<graph::MemoryPlanner>());
    state->signatures.push_back(std::move(sig));
  }
  for (const auto& [name, doc] : graphs.items())
    if (!signatures.contains(name))
      fail(kOp, loc, "'{}' holds the graph '{}', which no signature names", graphs_path, name);
  for (const auto& [name, t] : variables.tensors)
    if (!used.count(name))
      fail(kOp, loc, "'{}' holds '{}', which no signature captures", variables_path, name);

  for (const auto& [name, t] : variables.tensors) state->variables.emplace_back(name, t);
  for (const std::string& name : trainable_order) {
    Tensor leaf = *by_name.at(name);
    leaf.set_requires_grad(true, loc);
    state->trainable.push_back(leaf);
  }

  for (const Json& a : assets) {
    const std::string name = a.get<std::string>();
    const std::vector<uint8_t> bytes = r.file(std::string(format::kAssetsFolder) + "/" + name);
    state->assets.emplace(name, std::string(bytes.begin(), bytes.end()));
  }
  return SavedModel(std::move(state));
}

// --- SavedModel ----------------------------------------------------------------------------

const std::string& SavedModel::dir() const {
  return state_->dir;
}

const SavedModelInfo& SavedModel::info() const {
  return state_->info;
}

const std::vector<SignatureDef>& SavedModel::signatures() const {
  return state_->signatures;
}

const SignatureDef& SavedModel::signature(const std::string& name, const Loc& loc) const {
  std::vector<std::string> names;
  for (const SignatureDef& s : state_->signatures) {
    if (s.name == name) return s;
    names.push_back(s.name);
  }
  fail("SavedModel", loc, "'{}' has no signature '{}'; it has {}", state_->dir, name,
       fmt::join(names, ", "));
}

const graph::Graph& SavedModel::graph(const std::string& sig, const Loc& loc) const {
  signature(sig, loc);
  return state_->graphs.at(sig);
}

std::vector<Tensor> SavedModel::run(const std::string& sig, const std::vector<Tensor>& inputs,
                                    const Loc& loc) const {
  const graph::Graph& g = graph(sig, loc);
  return graph::run(g, inputs, loc, state_->planners.at(sig).get());
}

std::vector<std::pair<std::string, Tensor>> SavedModel::run_named(
    const std::string& sig, const std::vector<std::pair<std::string, Tensor>>& inputs,
    const Loc& loc) const {
  const SignatureDef& s = signature(sig, loc);
  std::vector<Tensor> ordered(s.inputs.size());
  std::vector<std::string> expected;
  for (const TensorInfo& t : s.inputs) expected.push_back(t.name);
  for (const auto& [name, t] : inputs) {
    auto it = std::find(expected.begin(), expected.end(), name);
    if (it == expected.end())
      fail("SavedModel", loc, "signature '{}' has no input '{}'; its inputs are {}", sig, name,
           fmt::join(expected, ", "));
    Tensor& slot = ordered[static_cast<size_t>(it - expected.begin())];
    if (slot.defined()) fail("SavedModel", loc, "the input '{}' is given twice", name);
    slot = t;
  }
  for (size_t i = 0; i < ordered.size(); ++i)
    if (!ordered[i].defined())
      fail("SavedModel", loc, "signature '{}' needs the input '{}' ({}), which was not given", sig,
           expected[i], s.inputs[i].describe());
  const std::vector<Tensor> out = run(sig, ordered, loc);
  std::vector<std::pair<std::string, Tensor>> named;
  for (size_t i = 0; i < out.size(); ++i) named.emplace_back(s.outputs[i].name, out[i]);
  return named;
}

const std::vector<std::pair<std::string, Tensor>>& SavedModel::variables() const {
  return state_->variables;
}

std::vector<Tensor> SavedModel::trainable_variables() const {
  return state_->trainable;
}

Tensor SavedModel::train_step(const std::string& sig, const std::vector<Tensor>& inputs,
                              const Loc& loc) const {
  const SignatureDef& s = signature(sig, loc);
  if (s.gradients.empty())
    fail("SavedModel", loc,
         "the signature '{}' (method \"{}\") computes no gradients: train_step runs a training "
         "signature (Note [training signatures])",
         sig, s.method);
  std::vector<Tensor> out;
  {
    NoGradGuard no_grad;  // the graph computes its own gradients
    out = run(sig, inputs, loc);
  }
  size_t loss = 0;
  for (size_t i = 0; i < s.outputs.size(); ++i)
    if (s.outputs[i].name == "loss") loss = i;
  NoGradGuard no_grad;
  for (const auto& [output, variable] : s.gradients) {
    size_t o = 0;
    while (s.outputs[o].name != output) ++o;
    auto v = std::find_if(state_->variables.begin(), state_->variables.end(),
                          [&](const auto& p) { return p.first == variable; });
    Tensor param = v->second;
    const Tensor g = param.grad();
    param.set_grad(g.defined() ? add(g, out[o], loc) : out[o]);  // accumulates, as backward does
  }
  return out[loss];
}

std::vector<std::string> SavedModel::asset_names() const {
  std::vector<std::string> names;
  for (const auto& [name, content] : state_->assets) names.push_back(name);
  return names;
}

const std::string& SavedModel::asset(const std::string& name, const Loc& loc) const {
  auto it = state_->assets.find(name);
  if (it == state_->assets.end())
    fail("SavedModel", loc, "'{}' has no asset '{}'; its assets are [{}]", state_->dir, name,
         fmt::join(asset_names(), ", "));
  return it->second;
}

}  // namespace kiln::io
