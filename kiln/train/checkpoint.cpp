#include "kiln/train/checkpoint.h"

#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/core/rng.h"
#include "kiln/io/dir_transaction.h"
#include "kiln/io/manifest.h"
#include "kiln/io/safetensors.h"

namespace kiln::train {

namespace {

using Json = nlohmann::json;

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kManifestFile = "checkpoint.json";

// The directory and manifest formats of Note [checkpoint layout]; everything about writing and
// verifying them is io's, this file only decides what goes in.
const io::DirLayout& layout() {
  static const io::DirLayout l{
      "checkpoint", {kModelFile, kOptimizerFile, kManifestFile}, kManifestFile};
  return l;
}

const io::ManifestFormat& manifest_format() {
  static const io::ManifestFormat f{
      .format = "kiln.checkpoint", .version = kCheckpointFormatVersion, .kind = "checkpoint"};
  return f;
}

// A wrapped error already carries the caller's location; keep it once.
std::string without_location(const std::string& message) {
  const size_t at = message.rfind(" — at ");
  return at == std::string::npos ? message : message.substr(0, at);
}

// --- the manifest (checkpoint.json) --------------------------------------------------------

struct CheckpointManifest {
  CheckpointManifest(std::string d, io::Manifest v) : dir(std::move(d)), verified(std::move(v)) {}

  std::string dir;  // the directory read: DIR, or DIR.old after an interrupted save
  io::Manifest verified;
  CheckpointState state;
  Json optimizer;
  Json scheduler;
  Generator::State rng{};
  io::FileRecord model_file;
  io::FileRecord optimizer_file;
};

CheckpointManifest read_manifest(const std::string& dir, const char* op, const Loc& loc) {
  const std::string resolved = io::resolve_committed_dir(dir, layout(), op, loc);
  CheckpointManifest m(
      resolved, io::Manifest::read(resolved + "/" + kManifestFile, manifest_format(), op, loc));
  const io::Manifest& r = m.verified;
  const Json& j = r.json();
  const auto max_int = static_cast<uint64_t>(INT64_MAX);
  m.state.epoch = static_cast<int64_t>(r.unsigned_field(j, "epoch", "the checkpoint", max_int));
  m.state.step = static_cast<int64_t>(r.unsigned_field(j, "step", "the checkpoint", max_int));
  m.state.metadata = r.field(j, "metadata", "the checkpoint");
  m.optimizer = r.field(j, "optimizer", "the checkpoint");
  if (!m.optimizer.is_object()) r.error("expected \"optimizer\" to be an object");
  m.scheduler = r.field(j, "scheduler", "the checkpoint");
  if (!m.scheduler.is_null() && !m.scheduler.is_object())
    r.error("expected \"scheduler\" to be an object or null, but got {}", m.scheduler.dump());
  const Json& rng = r.field(j, "rng", "the checkpoint");
  m.rng.seed = r.unsigned_field(rng, "seed", "\"rng\"");
  m.rng.offset = r.unsigned_field(rng, "offset", "\"rng\"");
  m.model_file = r.file_record(kModelFile);
  m.optimizer_file = r.file_record(kOptimizerFile);
  return m;
}

// Reads one tensor file of the set, checking it is the very file the manifest describes before
// the safetensors reader validates its structure.
io::SafetensorsFile read_tensor_file(const CheckpointManifest& m, const io::FileRecord& rec,
                                     const Loc& loc) {
  return io::parse_safetensors(m.verified.read_file(m.dir, rec), m.dir + "/" + rec.name, loc);
}

// True when load_state_dict(entries, strict) would accept `entries` (the same test it makes),
// so that it can be called last, after everything that might still fail.
bool fits_model(const nn::Module& model, const nn::StateDict& entries) {
  const nn::StateDict own = model.state_dict();
  if (own.size() != entries.size()) return false;
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [name, t] : entries) given.emplace(name, &t);
  for (const auto& [name, t] : own) {
    auto it = given.find(name);
    if (it == given.end() || !it->second->defined() || it->second->shape() != t.shape() ||
        it->second->dtype() != t.dtype())
      return false;
  }
  return given.size() == own.size();
}

// Throws load_state_dict's own strict error (naming every missing, unexpected or mismatched key)
// prefixed with the file, when the weights do not fit; otherwise changes nothing.
void check_fits_model(nn::Module& model, const nn::StateDict& entries, const std::string& path,
                      const char* op, const Loc& loc) {
  if (fits_model(model, entries)) return;
  try {
    model.load_state_dict(entries, true, loc);
  } catch (const Error& e) {
    fail(op, loc, "'{}' does not fit the model: {}", path, without_location(e.what()));
  }
  KILN_INTERNAL_ASSERT(false, "load_state_dict accepted weights that fits_model rejected");
}

nn::StateDict model_entries(io::SafetensorsFile file) {
  return nn::StateDict(std::make_move_iterator(file.tensors.begin()),
                       std::make_move_iterator(file.tensors.end()));
}

}  // namespace

void set_checkpoint_fault_hook(CheckpointFaultHook hook) {
  io::set_dir_transaction_fault_hook(std::move(hook));
}

void save_checkpoint(const std::string& dir_in, const nn::Module& model,
                     const optim::Optimizer& optimizer, const optim::LRScheduler* scheduler,
                     const CheckpointState& state, const Loc& loc) {
  const char* op = "save_checkpoint";
  const std::string dir = io::normalize_dir_path(dir_in, layout(), op, loc);
  if (state.epoch < 0 || state.step < 0)
    fail(op, loc, "expected epoch >= 0 and step >= 0, but got epoch {} and step {}", state.epoch,
         state.step);

  // Everything is serialized before the first file is touched: a failure here costs nothing.
  const std::vector<uint8_t> model_bytes = io::serialize_safetensors(model.state_dict(), {}, loc);
  const optim::OptimizerState opt = optimizer.state_dict();
  const std::vector<uint8_t> opt_bytes = io::serialize_safetensors(
      std::vector<std::pair<std::string, Tensor>>(opt.tensors.begin(), opt.tensors.end()), {}, loc);
  const Generator::State rng = default_generator().get_state();
  const Json content = {{"epoch", state.epoch},
                        {"step", state.step},
                        {"optimizer", opt.meta},
                        {"scheduler", scheduler ? scheduler->state_dict() : Json(nullptr)},
                        {"rng", {{"seed", rng.seed}, {"offset", rng.offset}}},
                        {"metadata", state.metadata},
                        {"files",
                         {{kModelFile, io::file_record_json(model_bytes)},
                          {kOptimizerFile, io::file_record_json(opt_bytes)}}}};
  const std::string text = io::seal_manifest(content, manifest_format(), dir, op, loc);

  io::DirTransaction transaction(dir, layout(), op, loc);
  transaction.write(kModelFile, model_bytes);
  transaction.write(kOptimizerFile, opt_bytes);
  transaction.write(kManifestFile, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  transaction.commit();
}

CheckpointState load_checkpoint(const std::string& dir, nn::Module& model,
                                optim::Optimizer& optimizer, optim::LRScheduler* scheduler,
                                const Loc& loc) {
  const char* op = "load_checkpoint";
  // Read and verify everything first; nothing is changed until all of it has passed.
  const CheckpointManifest m = read_manifest(dir, op, loc);
  if (scheduler != nullptr && m.scheduler.is_null())
    fail(op, loc, "'{}' holds no LR scheduler state, but a {} was given to restore",
         m.verified.path(), scheduler->name());
  const std::string model_path = m.dir + "/" + kModelFile;
  const std::string opt_path = m.dir + "/" + kOptimizerFile;
  const nn::StateDict weights = model_entries(read_tensor_file(m, m.model_file, loc));
  io::SafetensorsFile opt_file = read_tensor_file(m, m.optimizer_file, loc);
  check_fits_model(model, weights, model_path, op, loc);
  optim::OptimizerState opt{m.optimizer, {}};
  for (auto& [name, t] : opt_file.tensors) opt.tensors.emplace(name, std::move(t));

  // The scheduler's loader can fail after changing some fields, so it goes first and is rolled
  // back from a snapshot; the optimizer's validates everything before changing anything; the
  // model's cannot fail any more (checked above).
  Json scheduler_before;
  auto restore_scheduler = [&]() noexcept {
    if (scheduler_before.is_null()) return;
    try {
      scheduler->load_state_dict(scheduler_before, loc);
    } catch (...) {
    }
  };
  if (scheduler != nullptr) {
    scheduler_before = scheduler->state_dict();
    try {
      scheduler->load_state_dict(m.scheduler, loc);
    } catch (const Error& e) {
      restore_scheduler();
      fail(op, loc, "the scheduler state in '{}' does not fit the {}: {}", m.verified.path(),
           scheduler->name(), without_location(e.what()));
    }
  }
  try {
    optimizer.load_state_dict(opt, loc);
  } catch (const Error& e) {
    restore_scheduler();
    fail(op, loc, "'{}' (with the optimizer section of {}) does not fit the optimizer: {}",
         opt_path, kManifestFile, without_location(e.what()));
  }
  model.load_state_dict(weights, true, loc);
  default_generator().set_state(m.rng);
  return m.state;
}

CheckpointState read_checkpoint_state(const std::string& dir, const Loc& loc) {
  return read_manifest(dir, "read_checkpoint_state", loc).state;
}

nlohmann::json read_checkpoint_metadata(const std::string& dir, const Loc& loc) {
  return read_manifest(dir, "read_checkpoint_metadata", loc).state.metadata;
}

bool checkpoint_exists(const std::string& dir) {
  return io::committed_dir_exists(dir, layout());
}

void load_checkpoint_weights(const std::string& dir, nn::Module& model, const Loc& loc) {
  const char* op = "load_checkpoint_weights";
  const CheckpointManifest m = read_manifest(dir, op, loc);
  const nn::StateDict weights = model_entries(read_tensor_file(m, m.model_file, loc));
  check_fits_model(model, weights, m.dir + "/" + kModelFile, op, loc);
  model.load_state_dict(weights, true, loc);
}

}  // namespace kiln::train
