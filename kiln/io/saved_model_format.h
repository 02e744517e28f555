#pragma once
// The on-disk format of Note [saved model], shared by its writer and its reader.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kiln/graph/memory_planner.h"
#include "kiln/io/dir_transaction.h"
#include "kiln/io/manifest.h"
#include "kiln/io/saved_model.h"

namespace kiln::io {

// A loaded bundle (saved_model_load.cpp); save_model(const SavedModel&) writes one back.
struct SavedModel::State {
  std::string dir;
  SavedModelInfo info;
  std::vector<SignatureDef> signatures;
  std::map<std::string, graph::Graph> graphs;  // by signature
  // Each graph's memory planner (Note [memory planner]), shared by concurrent calls.
  std::map<std::string, std::shared_ptr<graph::MemoryPlanner>> planners;
  std::vector<std::pair<std::string, Tensor>> variables;
  std::vector<Tensor> trainable;  // in the order of `variables`
  std::map<std::string, std::string> assets;
};

}  // namespace kiln::io

namespace kiln::io::saved_model_format {

constexpr const char* kManifestFile = "saved_model.json";
constexpr const char* kGraphsFile = "graphs.json";
constexpr const char* kVariablesFile = "variables.safetensors";
constexpr const char* kAssetsFolder = "assets";
// graphs.json holds nested graph documents (control flow nests one per level); deeper is corrupt.
constexpr size_t kMaxGraphDepth = 1024;

const DirLayout& layout();
const ManifestFormat& manifest_format();

// The precisions a bundle may record.
bool is_known_precision(std::string_view precision);
const char* known_precisions();  // "float32, bf16-autocast, fp16-autocast, int8" for errors

// Whether `name` may name a file in assets/ (one plain file name: no '/', NUL, "." or "..").
bool is_plain_file_name(std::string_view name);

// {"name", "dtype", "shape": [-1 for a symbolic dim], "dims": [the symbol or ""]}
nlohmann::json tensor_info_json(const TensorInfo& info);

}  // namespace kiln::io::saved_model_format
