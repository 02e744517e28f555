#include "kiln/train/callbacks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/io/regular_file.h"
#include "kiln/io/safetensors.h"

namespace kiln::train {
namespace {

std::string available_keys(const Logs& logs) {
  std::string keys;
  for (const auto& [name, value] : logs) keys += (keys.empty() ? "" : ", ") + name;
  return keys.empty() ? "none" : keys;
}

// Whether `monitor` is maximized under `mode` (see EarlyStopping).
bool maximizes(const std::string& op, const std::string& monitor, const std::string& mode,
               const Loc& loc) {
  if (mode == "min" || mode == "max") return mode == "max";
  if (mode != "auto")
    fail(op, loc, "expected mode \"auto\", \"min\" or \"max\", but got \"{}\"", mode);
  for (const char* key : {"acc", "f1", "precision", "recall"})
    if (monitor.find(key) != std::string::npos) return true;
  return false;
}

double monitored(const std::string& op, const std::string& monitor, const Logs& logs,
                 const Loc& loc) {
  auto it = logs.find(monitor);
  if (it == logs.end())
    fail(op, loc, "expected monitor \"{}\" among the logs, but got {}", monitor,
         available_keys(logs));
  return it->second;
}

void check_monitor_name(const std::string& op, const std::string& monitor, const Loc& loc) {
  if (monitor.empty()) fail(op, loc, "expected a monitor name, but got an empty string");
}

// Group 0's lr, the one Keras reports as "lr".
void log_lr(optim::Optimizer& optimizer, Logs& logs) {
  if (!optimizer.param_groups().empty()) logs["lr"] = optimizer.param_groups()[0].lr();
}

// A state for load_state must be an object holding `keys` (values are checked when read).
void check_state(const char* op, const nlohmann::json& state,
                 std::initializer_list<const char*> keys, const Loc& loc) {
  if (!state.is_object()) fail(op, loc, "expected a state object, but got {}", state.dump());
  for (const char* key : keys)
    if (!state.contains(key))
      fail(op, loc, "expected a state with \"{}\", but got {}", key, state.dump());
}

}  // namespace

// --- Callback --------------------------------------------------------------------------------

nn::Module& Callback::model(const Loc& loc) const {
  if (context_model_ == nullptr)
    fail(name(), loc,
         "expected a model, but the callback is not attached to a trainer (Trainer::fit "
         "attaches its callbacks; set_context attaches one by hand)");
  return *context_model_;
}

optim::Optimizer& Callback::optimizer(const Loc& loc) const {
  if (context_optimizer_ == nullptr)
    fail(name(), loc,
         "expected an optimizer, but the callback is not attached to a trainer (Trainer::fit "
         "attaches its callbacks; set_context attaches one by hand)");
  return *context_optimizer_;
}

Loc Callback::where() const {
  const bool in_std =
      std::string_view(loc_.file_name()).find("/include/c++/") != std::string_view::npos;
  return (in_std || !has_loc_) && has_fit_loc_ ? fit_loc_ : loc_;
}

// --- EarlyStopping ---------------------------------------------------------------------------

EarlyStopping::EarlyStopping(std::string monitor, int patience, double min_delta, std::string mode,
                             bool restore_best_weights, const Loc& loc)
    : Callback(loc),
      monitor_(std::move(monitor)),
      patience_(patience),
      min_delta_(min_delta),
      restore_best_weights_(restore_best_weights) {
  check_monitor_name("EarlyStopping", monitor_, loc);
  if (patience < 0) fail("EarlyStopping", loc, "expected patience >= 0, but got {}", patience);
  if (!(min_delta >= 0.0) || std::isinf(min_delta))
    fail("EarlyStopping", loc, "expected a finite min_delta >= 0, but got {}", min_delta);
  maximize_ = maximizes("EarlyStopping", monitor_, mode, loc);
}

void EarlyStopping::on_train_begin() {
  wait_ = 0;
  stopped_epoch_ = -1;
  best_epoch_ = -1;
  last_epoch_ = -1;
  has_best_ = false;
  restored_ = false;
  best_weights_.clear();
  if (pending_state_.is_null()) return;
  wait_ = pending_state_.at("wait").get<int>();
  has_best_ = pending_state_.at("has_best").get<bool>();
  best_ = pending_state_.at("best").get<double>();
  best_epoch_ = pending_state_.at("best_epoch").get<int>();
  pending_state_ = nullptr;
}

nlohmann::json EarlyStopping::state() const {
  return {{"wait", wait_}, {"has_best", has_best_}, {"best", best_}, {"best_epoch", best_epoch_}};
}

void EarlyStopping::load_state(const nlohmann::json& state, const Loc& loc) {
  check_state("EarlyStopping", state, {"wait", "has_best", "best", "best_epoch"}, loc);
  pending_state_ = state;
}

bool EarlyStopping::on_epoch_end(int epoch, const Logs& logs) {
  const double value = monitored("EarlyStopping", monitor_, logs, where());
  last_epoch_ = epoch;
  const bool improved =
      !has_best_ || (maximize_ ? value - min_delta_ > best_ : value + min_delta_ < best_);
  if (improved) {
    best_ = value;
    best_epoch_ = epoch;
    has_best_ = true;
    wait_ = 0;
    if (restore_best_weights_) {
      NoGradGuard no_grad;
      best_weights_.clear();
      for (const auto& [key, tensor] : model(where()).state_dict())
        best_weights_.emplace_back(key, tensor.clone(where()));
    }
    return false;
  }
  if (++wait_ >= patience_ && epoch > 0) {
    stopped_epoch_ = epoch;
    if (restore_best_weights_) restore();
    return true;
  }
  return false;
}

void EarlyStopping::on_train_end(const Logs& /*logs*/) {
  if (restore_best_weights_ && !restored_ && has_best_ && best_epoch_ != last_epoch_) restore();
}

void EarlyStopping::restore() {
  if (best_weights_.empty()) return;
  model(where()).load_state_dict(best_weights_, /*strict=*/true, where());
  restored_ = true;
}

std::string EarlyStopping::stop_reason() const {
  if (stopped_epoch_ < 0) return {};
  std::string reason =
      fmt::format("EarlyStopping: {} did not improve for {} epoch(s) (best {:.6g} at epoch {})",
                  monitor_, wait_, best_, best_epoch_ + 1);
  if (restored_) reason += fmt::format("; restored the weights of epoch {}", best_epoch_ + 1);
  return reason;
}

// --- ModelCheckpoint -------------------------------------------------------------------------

namespace {

// A placeholder's text for `value`; "{epoch}" without a spec is two digits, as Keras users write
// "{epoch:02d}".
template <class T>
std::string format_placeholder(const std::string& spec, T value) {
  if (!spec.empty()) return fmt::format(fmt::runtime("{:" + spec + "}"), value);
  if constexpr (std::is_integral_v<T>)
    return fmt::format("{:02d}", value);
  else
    return fmt::format("{}", value);
}

}  // namespace

ModelCheckpoint::ModelCheckpoint(std::string path_pattern, std::string monitor, bool save_best_only,
                                 std::string mode, const Loc& loc)
    : Callback(loc),
      pattern_(std::move(path_pattern)),
      monitor_(std::move(monitor)),
      save_best_only_(save_best_only) {
  const char* op = "ModelCheckpoint";
  if (pattern_.empty()) fail(op, loc, "expected a path pattern, but got an empty string");
  check_monitor_name(op, monitor_, loc);
  maximize_ = maximizes(op, monitor_, mode, loc);

  std::string text;
  auto flush_text = [&] {
    if (!text.empty()) pieces_.push_back(Piece{std::move(text), "", false});
    text.clear();
  };
  for (size_t i = 0; i < pattern_.size(); ++i) {
    const char c = pattern_[i];
    const bool doubled = i + 1 < pattern_.size() && pattern_[i + 1] == c;
    if ((c == '{' || c == '}') && doubled) {
      text += c;
      ++i;
    } else if (c == '}') {
      fail(op, loc,
           "expected '}}' only after a placeholder's '{{', but got one at offset {} of \"{}\"", i,
           pattern_);
    } else if (c == '{') {
      const size_t close = pattern_.find('}', i);
      const std::string inner =
          close == std::string::npos ? "" : pattern_.substr(i + 1, close - i - 1);
      const size_t colon = inner.find(':');
      const std::string key = inner.substr(0, colon);
      if (close == std::string::npos || key.empty() || inner.find('{') != std::string::npos)
        fail(op, loc,
             "expected placeholders like {{epoch}} or {{val_loss:.4f}}, but got a malformed one "
             "at offset {} of \"{}\"",
             i, pattern_);
      flush_text();
      Piece piece{key, colon == std::string::npos ? "" : inner.substr(colon + 1), true};
      try {  // a spec that cannot format its value fails here, not after an epoch of training
        if (key == "epoch")
          format_placeholder(piece.spec, 1);
        else
          format_placeholder(piece.spec, 0.5);
      } catch (const fmt::format_error& e) {
        fail(op, loc, "expected a valid format spec for \"{}\" in \"{}\", but got \"{}\" ({})", key,
             pattern_, piece.spec, e.what());
      }
      pieces_.push_back(std::move(piece));
      i = close;
    } else {
      text += c;
    }
  }
  flush_text();
}

std::string ModelCheckpoint::format_path(int epoch, const Logs& logs) const {
  std::string path;
  for (const Piece& piece : pieces_) {
    if (!piece.placeholder)
      path += piece.text;
    else if (piece.text == "epoch")
      path += format_placeholder(piece.spec, epoch + 1);
    else
      path +=
          format_placeholder(piece.spec, monitored("ModelCheckpoint", piece.text, logs, where()));
  }
  return path;
}

bool ModelCheckpoint::on_epoch_end(int epoch, const Logs& logs) {
  auto it = logs.find(monitor_);
  if (save_best_only_ && it == logs.end()) monitored("ModelCheckpoint", monitor_, logs, where());
  bool improved = false;
  if (it != logs.end() && !std::isnan(it->second)) {
    const double value = it->second;
    improved = !has_best_ || (maximize_ ? value > best_ : value < best_);
    if (improved) {
      best_ = value;
      has_best_ = true;
    }
  }
  if (save_best_only_ && !improved) return false;

  const std::string path = format_path(epoch, logs);
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : logs) metadata[key] = fmt::format("{}", value);
  metadata["epoch"] = std::to_string(epoch + 1);
  try {
    io::save_safetensors(path, model(where()).state_dict(), metadata, where());
  } catch (const Error& e) {
    fail("ModelCheckpoint", where(), "expected to save epoch {} to \"{}\", but got: {}", epoch + 1,
         path, e.what());
  }
  last_saved_path_ = path;
  ++save_count_;
  return false;
}

nlohmann::json ModelCheckpoint::state() const {
  return {{"has_best", has_best_}, {"best", best_}};
}

void ModelCheckpoint::load_state(const nlohmann::json& state, const Loc& loc) {
  check_state("ModelCheckpoint", state, {"has_best", "best"}, loc);
  has_best_ = state.at("has_best").get<bool>();
  best_ = state.at("best").get<double>();
}

// --- ReduceLROnPlateau -----------------------------------------------------------------------

ReduceLROnPlateau::ReduceLROnPlateau(std::string monitor, double factor, int patience,
                                     double min_delta, int cooldown, double min_lr,
                                     std::string mode, std::ostream* verbose, const Loc& loc)
    : Callback(loc), monitor_(std::move(monitor)), verbose_(verbose) {
  const char* op = "ReduceLROnPlateau";
  check_monitor_name(op, monitor_, loc);
  if (!(factor > 0.0 && factor < 1.0)) fail(op, loc, "expected 0 < factor < 1, but got {}", factor);
  if (patience < 0) fail(op, loc, "expected patience >= 0, but got {}", patience);
  if (cooldown < 0) fail(op, loc, "expected cooldown >= 0, but got {}", cooldown);
  if (!(min_delta >= 0.0) || std::isinf(min_delta))
    fail(op, loc, "expected a finite min_delta >= 0, but got {}", min_delta);
  if (!(min_lr >= 0.0) || std::isinf(min_lr))
    fail(op, loc, "expected a finite min_lr >= 0, but got {}", min_lr);
  // Keras lowers the lr at the patience-th bad epoch in a row (0 acting as 1) and counts the
  // epoch that ends a cooldown; PyTorch lowers it at the (patience + 1)-th and skips `cooldown`
  // whole epochs. Hence the shifts by one.
  options_.mode = maximizes(op, monitor_, mode, loc) ? "max" : "min";
  options_.factor = factor;
  options_.patience = std::max(patience - 1, 0);
  options_.threshold = min_delta;
  options_.threshold_mode = "abs";
  options_.cooldown = std::max(cooldown - 1, 0);
  options_.min_lr = {min_lr};
  options_.eps = 0.0;  // Keras lowers any lr above min_lr, however small the step
}

void ReduceLROnPlateau::on_train_begin() {
  plateau_ = std::make_unique<optim::ReduceLROnPlateau>(optimizer(where()), options_, where());
  reductions_ = 0;
  if (pending_state_.is_null()) return;
  plateau_->load_state_dict(pending_state_.at("plateau"), where());
  reductions_ = pending_state_.at("reductions").get<int64_t>();
  pending_state_ = nullptr;
}

nlohmann::json ReduceLROnPlateau::state() const {
  if (!plateau_) return pending_state_;
  return {{"plateau", plateau_->state_dict()}, {"reductions", reductions_}};
}

void ReduceLROnPlateau::load_state(const nlohmann::json& state, const Loc& loc) {
  check_state("ReduceLROnPlateau", state, {"plateau", "reductions"}, loc);
  pending_state_ = state;
}

void ReduceLROnPlateau::update_logs(int /*epoch*/, Logs& logs) {
  log_lr(optimizer(where()), logs);
}

bool ReduceLROnPlateau::on_epoch_end(int epoch, const Logs& logs) {
  const double value = monitored("ReduceLROnPlateau", monitor_, logs, where());
  if (!plateau_) on_train_begin();  // driven by hand, without fit
  const std::vector<double> before = plateau_->get_last_lr();
  plateau_->step(value);
  const std::vector<double>& after = plateau_->get_last_lr();
  bool reduced = false;
  for (size_t i = 0; i < after.size() && i < before.size(); ++i) reduced |= after[i] < before[i];
  if (reduced) {
    ++reductions_;
    if (verbose_ != nullptr)
      *verbose_ << fmt::format("Epoch {}: ReduceLROnPlateau reducing learning rate to {}.\n",
                               epoch + 1, after.empty() ? 0.0 : after[0]);
  }
  return false;
}

double ReduceLROnPlateau::best() const {
  if (plateau_) return plateau_->best();
  return options_.mode == "min" ? std::numeric_limits<double>::infinity()
                                : -std::numeric_limits<double>::infinity();
}

// --- CSVLogger -------------------------------------------------------------------------------

namespace {

// Quotes a field holding the separator, a quote or a line break (RFC 4180).
std::string csv_field(const std::string& text, char separator) {
  if (text.find_first_of(std::string{separator, '"', '\n', '\r'}) == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::vector<std::string> split(const std::string& line, char separator) {
  std::vector<std::string> fields(1);
  for (char c : line) {
    if (c == separator)
      fields.emplace_back();
    else if (c != '\r')
      fields.back() += c;
  }
  return fields;
}

}  // namespace

CSVLogger::CSVLogger(std::string path, bool append, char separator, const Loc& loc)
    : Callback(loc), path_(std::move(path)), append_(append), separator_(separator) {
  if (path_.empty()) fail("CSVLogger", loc, "expected a file path, but got an empty string");
  if (separator == '"' || separator == '\n' || separator == '\r' || separator == '\0')
    fail("CSVLogger", loc,
         "expected a separator other than a quote, a line break or NUL, but got character {}",
         static_cast<int>(separator));
}

void CSVLogger::open() {
  if (file_.is_open()) file_.close();
  keys_.clear();
  header_done_ = false;
  io::check_writable_path(path_, "CSVLogger", where());
  if (append_) {  // continue under the existing header (a resumed run)
    std::ifstream in(path_);
    std::string header;
    if (in && std::getline(in, header) && !header.empty()) {
      std::vector<std::string> fields = split(header, separator_);
      if (fields.front() != "epoch")
        fail("CSVLogger", where(),
             "expected \"{}\" to start with an \"epoch\" column, but got \"{}\"", path_, header);
      keys_.assign(fields.begin() + 1, fields.end());
      header_done_ = true;
    }
  }
  file_.open(path_, append_ ? std::ios::out | std::ios::app : std::ios::out | std::ios::trunc);
  if (!file_.is_open())
    fail("CSVLogger", where(), "expected to open \"{}\" for writing, but got: {}", path_,
         std::strerror(errno));
}

void CSVLogger::on_train_begin() {
  open();
}

bool CSVLogger::on_epoch_end(int epoch, const Logs& logs) {
  if (!file_.is_open()) open();
  if (!header_done_) {
    keys_.clear();
    for (const auto& [key, value] : logs) keys_.push_back(key);  // std::map: sorted
    file_ << "epoch";
    for (const auto& key : keys_) file_ << separator_ << csv_field(key, separator_);
    file_ << '\n';
    header_done_ = true;
  }
  file_ << epoch;
  for (const auto& key : keys_) {
    auto it = logs.find(key);
    file_ << separator_ << (it == logs.end() ? std::string("NA") : fmt::format("{}", it->second));
  }
  file_ << '\n';
  file_.flush();
  if (!file_)
    fail("CSVLogger", where(), "expected to write epoch {} to \"{}\", but the write failed: {}",
         epoch, path_, std::strerror(errno));
  return false;
}

void CSVLogger::on_train_end(const Logs& /*logs*/) {
  if (file_.is_open()) file_.close();
}

// --- LearningRateScheduler -------------------------------------------------------------------

LearningRateScheduler::LearningRateScheduler(std::shared_ptr<optim::LRScheduler> scheduler,
                                             bool per_batch, const Loc& loc)
    : Callback(loc), scheduler_(std::move(scheduler)), per_batch_(per_batch) {
  if (!scheduler_)
    fail("LearningRateScheduler", loc, "expected an LRScheduler, but got a null pointer");
}

LearningRateScheduler::LearningRateScheduler(Schedule schedule, std::ostream* verbose,
                                             const Loc& loc)
    : Callback(loc), schedule_(std::move(schedule)), verbose_(verbose) {
  if (!schedule_)
    fail("LearningRateScheduler", loc, "expected a schedule function, but got an empty one");
}

void LearningRateScheduler::on_epoch_begin(int epoch) {
  if (!schedule_) return;
  auto& groups = optimizer(where()).param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const double lr = schedule_(epoch, groups[g].lr(where()));
    if (!std::isfinite(lr) || lr < 0.0)
      fail("LearningRateScheduler", where(),
           "expected the schedule to return a finite lr >= 0, but got {} for epoch {} (group {})",
           lr, epoch, g);
    groups[g].set_lr(lr);
    if (g == 0 && verbose_ != nullptr)
      *verbose_ << fmt::format("Epoch {}: LearningRateScheduler setting learning rate to {}.\n",
                               epoch + 1, lr);
  }
}

bool LearningRateScheduler::on_batch_end(int64_t /*batch*/, const Logs& /*batch_logs*/) {
  if (scheduler_ && per_batch_) scheduler_->step(where());
  return false;
}

void LearningRateScheduler::update_logs(int /*epoch*/, Logs& logs) {
  log_lr(optimizer(where()), logs);
}

bool LearningRateScheduler::on_epoch_end(int /*epoch*/, const Logs& /*logs*/) {
  if (scheduler_ && !per_batch_) scheduler_->step(where());
  return false;
}

// --- TerminateOnNaN --------------------------------------------------------------------------

void TerminateOnNaN::on_train_begin() {
  terminated_epoch_ = -1;
  terminated_batch_ = -1;
}

bool TerminateOnNaN::on_batch_end(int64_t batch, const Logs& batch_logs) {
  const double loss = monitored("TerminateOnNaN", "loss", batch_logs, where());
  if (std::isfinite(loss)) return false;
  terminated_epoch_ = epoch_;
  terminated_batch_ = batch;
  bad_loss_ = loss;
  if (out_ != nullptr)
    *out_ << fmt::format("Batch {}: Invalid loss, terminating training\n", batch);
  return true;
}

std::string TerminateOnNaN::stop_reason() const {
  if (terminated_batch_ < 0) return {};
  return fmt::format("TerminateOnNaN: loss is {} at batch {} of epoch {}", bad_loss_,
                     terminated_batch_ + 1, terminated_epoch_ + 1);
}

// --- LambdaCallback --------------------------------------------------------------------------

void LambdaCallback::on_train_begin() {
  if (hooks_.on_train_begin) hooks_.on_train_begin();
}

void LambdaCallback::on_train_end(const Logs& logs) {
  if (hooks_.on_train_end) hooks_.on_train_end(logs);
}

void LambdaCallback::on_epoch_begin(int epoch) {
  if (hooks_.on_epoch_begin) hooks_.on_epoch_begin(epoch);
}

void LambdaCallback::update_logs(int epoch, Logs& logs) {
  if (hooks_.update_logs) hooks_.update_logs(epoch, logs);
}

bool LambdaCallback::on_epoch_end(int epoch, const Logs& logs) {
  return hooks_.on_epoch_end ? hooks_.on_epoch_end(epoch, logs) : false;
}

bool LambdaCallback::on_batch_end(int64_t batch, const Logs& batch_logs) {
  return hooks_.on_batch_end ? hooks_.on_batch_end(batch, batch_logs) : false;
}

}  // namespace kiln::train
