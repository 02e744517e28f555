#include "kiln/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace kiln::optim {

namespace {

constexpr double kPi = std::numbers::pi;

// JSON has no infinities; ReduceLROnPlateau's `best` starts at one.
nlohmann::json number_to_json(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

double number_from_json(const nlohmann::json& j) {
  if (j.is_string()) {
    if (j == "inf") return std::numeric_limits<double>::infinity();
    if (j == "-inf") return -std::numeric_limits<double>::infinity();
  }
  return j.get<double>();
}

// One value for every group, or one per group.
std::vector<double> per_group(const std::vector<double>& values, size_t groups,
                              const std::string& op, const char* what, const Loc& loc) {
  if (values.size() == 1) return std::vector<double>(groups, values[0]);
  if (values.size() != groups)
    fail(op, loc, "expected one {} or one per param group ({}), but got {} values", what, groups,
         values.size());
  return values;
}

}  // namespace

// --- LRScheduler ---------------------------------------------------------------------------------

LRScheduler::LRScheduler(Optimizer& optimizer, int64_t last_epoch, const Loc& loc)
    : optimizer_(optimizer), last_epoch_(last_epoch) {
  if (last_epoch < -1)
    fail("lr_scheduler", loc, "expected last_epoch >= -1, but got {}", last_epoch);
}

void LRScheduler::initial_step(const Loc& loc) {
  auto& groups = optimizer_.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    auto& options = groups[i].options;
    if (last_epoch_ == -1) {
      if (!options.contains("initial_lr")) options["initial_lr"] = options["lr"];
    } else if (!options.contains("initial_lr")) {
      fail(name(), loc,
           "expected param group {} to have \"initial_lr\" when resuming (last_epoch = {}), but "
           "got none",
           i, last_epoch_);
    }
    base_lrs_.push_back(groups[i].number("initial_lr"));
  }
  step_count_ = 0;
  step(loc);
}

std::vector<double> LRScheduler::group_lrs() const {
  std::vector<double> out;
  for (const auto& g : optimizer_.param_groups()) out.push_back(g.lr());
  return out;
}

void LRScheduler::step(const Loc& loc) {
  auto& groups = optimizer_.param_groups();
  if (groups.size() != base_lrs_.size())
    fail(name(), loc,
         "expected the optimizer to keep the {} param groups it had when the scheduler was made, "
         "but got {}",
         base_lrs_.size(), groups.size());
  ++step_count_;
  ++last_epoch_;
  std::vector<double> values = get_lr(loc);
  for (size_t i = 0; i < groups.size(); ++i) groups[i].set_lr(values[i]);
  last_lr_ = group_lrs();
}

nlohmann::json LRScheduler::state_dict() const {
  return {{"scheduler", name()},       {"last_epoch", last_epoch_},
          {"step_count", step_count_}, {"base_lrs", base_lrs_},
          {"last_lr", last_lr_},       {"hyperparameters", hyperparameters()}};
}

void LRScheduler::load_state_dict(const nlohmann::json& state, const Loc& loc) {
  const std::string op = std::string(name()) + ".load_state_dict";
  if (!state.is_object() || state.value("scheduler", "") != name())
    fail(op, loc, "expected a state dict of {}, but got {}", name(),
         state.is_object() && state.contains("scheduler") ? state["scheduler"].dump()
                                                          : state.dump());
  for (const char* key : {"last_epoch", "step_count"})
    if (!state.contains(key) || !state[key].is_number_integer())
      fail(op, loc, "expected an integer \"{}\", but got {}", key,
           state.contains(key) ? state[key].dump() : "none");
  for (const char* key : {"base_lrs", "last_lr"})
    if (!state.contains(key) || !state[key].is_array() ||
        state[key].size() != optimizer_.param_groups().size())
      fail(op, loc, "expected \"{}\" with one value per param group ({}), but got {}", key,
           optimizer_.param_groups().size(), state.contains(key) ? state[key].dump() : "none");
  if (!state.contains("hyperparameters") || !state["hyperparameters"].is_object())
    fail(op, loc, "expected \"hyperparameters\", but got {}", state.dump());
  try {
    set_hyperparameters(state["hyperparameters"]);
    base_lrs_ = state["base_lrs"].get<std::vector<double>>();
    last_lr_ = state["last_lr"].get<std::vector<double>>();
  } catch (const nlohmann::json::exception& e) {
    fail(op, loc, "expected {}'s hyperparameters and numbers, but got {} ({})", name(),
         state.dump(), e.what());
  }
  last_epoch_ = state["last_epoch"].get<int64_t>();
  step_count_ = state["step_count"].get<int64_t>();
}

// --- StepLR, MultiStepLR, ExponentialLR
// ------------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma, int64_t last_epoch,
               const Loc& loc)
    : LRScheduler(optimizer, last_epoch, loc), step_size_(step_size), gamma_(gamma) {
  if (step_size < 1) fail(name(), loc, "expected step_size >= 1, but got {}", step_size);
  initial_step(loc);
}

std::vector<double> StepLR::get_lr(const Loc&) {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lrs;
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

nlohmann::json StepLR::hyperparameters() const {
  return {{"step_size", step_size_}, {"gamma", gamma_}};
}
void StepLR::set_hyperparameters(const nlohmann::json& h) {
  step_size_ = h.at("step_size").get<int64_t>();
  gamma_ = h.at("gamma").get<double>();
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma,
                         int64_t last_epoch, const Loc& loc)
    : LRScheduler(optimizer, last_epoch, loc), milestones_(std::move(milestones)), gamma_(gamma) {
  initial_step(loc);
}

std::vector<double> MultiStepLR::get_lr(const Loc&) {
  std::vector<double> lrs = group_lrs();
  auto hits = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  if (hits == 0) return lrs;
  for (double& lr : lrs) lr *= std::pow(gamma_, static_cast<double>(hits));
  return lrs;
}

nlohmann::json MultiStepLR::hyperparameters() const {
  return {{"milestones", milestones_}, {"gamma", gamma_}};
}
void MultiStepLR::set_hyperparameters(const nlohmann::json& h) {
  milestones_ = h.at("milestones").get<std::vector<int64_t>>();
  gamma_ = h.at("gamma").get<double>();
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma, int64_t last_epoch, const Loc& loc)
    : LRScheduler(optimizer, last_epoch, loc), gamma_(gamma) {
  initial_step(loc);
}

std::vector<double> ExponentialLR::get_lr(const Loc&) {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) return lrs;
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

nlohmann::json ExponentialLR::hyperparameters() const {
  return {{"gamma", gamma_}};
}
void ExponentialLR::set_hyperparameters(const nlohmann::json& h) {
  gamma_ = h.at("gamma").get<double>();
}

// --- CosineAnnealingLR
// ------------------------------------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min,
                                     int64_t last_epoch, const Loc& loc)
    : LRScheduler(optimizer, last_epoch, loc), t_max_(t_max), eta_min_(eta_min) {
  if (t_max < 1) fail(name(), loc, "expected T_max >= 1, but got {}", t_max);
  initial_step(loc);
}

std::vector<double> CosineAnnealingLR::get_lr(const Loc&) {
  std::vector<double> lrs = group_lrs();
  const double e = static_cast<double>(last_epoch_), t = static_cast<double>(t_max_);
  if (last_epoch_ == 0) return lrs;
  for (size_t i = 0; i < lrs.size(); ++i) {
    const double base = base_lrs_[i];
    if (step_count_ == 1 && last_epoch_ > 0) {
      lrs[i] = eta_min_ + (base - eta_min_) * (1 + std::cos(e * kPi / t)) / 2;
    } else if ((last_epoch_ - 1 - t_max_) % (2 * t_max_) == 0) {
      lrs[i] = lrs[i] + (base - eta_min_) * (1 - std::cos(kPi / t)) / 2;
    } else {
      lrs[i] =
          (1 + std::cos(kPi * e / t)) / (1 + std::cos(kPi * (e - 1) / t)) * (lrs[i] - eta_min_) +
          eta_min_;
    }
  }
  return lrs;
}

nlohmann::json CosineAnnealingLR::hyperparameters() const {
  return {{"T_max", t_max_}, {"eta_min", eta_min_}};
}
void CosineAnnealingLR::set_hyperparameters(const nlohmann::json& h) {
  t_max_ = h.at("T_max").get<int64_t>();
  eta_min_ = h.at("eta_min").get<double>();
}

// --- LinearLR
// -----------------------------------------------------------------------------------------

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor,
                   int64_t total_iters, int64_t last_epoch, const Loc& loc)
    : LRScheduler(optimizer, last_epoch, loc),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  // start_factor 0 would divide by zero in the recursive formula at epoch 1.
  if (!(start_factor > 0 && start_factor <= 1))
    fail(name(), loc, "expected 0 < start_factor <= 1, but got {}", start_factor);
  if (!(end_factor >= 0 && end_factor <= 1))
    fail(name(), loc, "expected 0 <= end_factor <= 1, but got {}", end_factor);
  if (total_iters < 0) fail(name(), loc, "expected total_iters >= 0, but got {}", total_iters);
  initial_step(loc);
}

std::vector<double> LinearLR::get_lr(const Loc&) {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr *= start_factor_;
    return lrs;
  }
  if (last_epoch_ > total_iters_) return lrs;
  const double diff = end_factor_ - start_factor_;
  for (double& lr : lrs)
    lr *= 1. + diff / (static_cast<double>(total_iters_) * start_factor_ +
                       static_cast<double>(last_epoch_ - 1) * diff);
  return lrs;
}

nlohmann::json LinearLR::hyperparameters() const {
  return {
      {"start_factor", start_factor_}, {"end_factor", end_factor_}, {"total_iters", total_iters_}};
}
void LinearLR::set_hyperparameters(const nlohmann::json& h) {
  start_factor_ = h.at("start_factor").get<double>();
  end_factor_ = h.at("end_factor").get<double>();
  total_iters_ = h.at("total_iters").get<int64_t>();
}

// --- OneCycleLR
// ---------------------------------------------------------------------------------------

OneCycleLR::OneCycleLR(Optimizer& optimizer, OneCycleLROptions options, int64_t last_epoch,
                       const Loc& loc)
    : LRScheduler(optimizer, last_epoch, loc), options_(std::move(options)) {
  const OneCycleLROptions& o = options_;
  if (o.total_steps <= 0)
    fail(name(), loc, "expected a positive total_steps, but got {}", o.total_steps);
  if (!(o.pct_start >= 0 && o.pct_start <= 1))
    fail(name(), loc, "expected 0 <= pct_start <= 1, but got {}", o.pct_start);
  if (o.anneal_strategy != "cos" && o.anneal_strategy != "linear")
    fail(name(), loc, "expected anneal_strategy \"cos\" or \"linear\", but got \"{}\"",
         o.anneal_strategy);
  auto& groups = optimizer.param_groups();
  std::vector<double> max_lrs = per_group(o.max_lr, groups.size(), name(), "max_lr", loc);
  make_phases();
  if (last_epoch == -1) {
    for (size_t i = 0; i < groups.size(); ++i) {
      auto& g = groups[i].options;
      g["initial_lr"] = max_lrs[i] / o.div_factor;
      g["max_lr"] = max_lrs[i];
      g["min_lr"] = g["initial_lr"].get<double>() / o.final_div_factor;
    }
  }
  if (o.cycle_momentum) {
    const auto& defaults = optimizer.defaults();
    if (!defaults.contains("momentum") && !defaults.contains("betas"))
      fail(name(), loc,
           "expected an optimizer with \"momentum\" or \"betas\" for cycle_momentum, but got {} "
           "(pass cycle_momentum = false)",
           optimizer.name());
    use_beta1_ = defaults.contains("betas");
    if (last_epoch == -1) {
      for (auto& group : groups) {
        auto& g = group.options;
        if (use_beta1_)
          g["betas"][0] = o.max_momentum;
        else
          g["momentum"] = o.max_momentum;
        g["max_momentum"] = o.max_momentum;
        g["base_momentum"] = o.base_momentum;
      }
    }
  }
  initial_step(loc);
}

void OneCycleLR::make_phases() {
  const double total = static_cast<double>(options_.total_steps);
  const double pct = options_.pct_start;
  if (options_.three_phase) {
    phases_ = {{pct * total - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
               {2 * pct * total - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"},
               {total - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"}};
  } else {
    phases_ = {{pct * total - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
               {total - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"}};
  }
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy == "linear") return (end - start) * pct + start;
  const double cos_out = std::cos(kPi * pct) + 1;
  return end + (start - end) / 2.0 * cos_out;
}

std::vector<double> OneCycleLR::get_lr(const Loc& loc) {
  const int64_t step_num = last_epoch_;
  if (step_num > options_.total_steps)
    fail(name(), loc, "expected at most total_steps = {} steps, but got step {}",
         options_.total_steps, step_num + 1);
  std::vector<double> lrs;
  for (auto& group : optimizer_.param_groups()) {
    double start_step = 0, lr = 0, momentum = 0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& phase = phases_[i];
      if (static_cast<double>(step_num) <= phase.end_step || i + 1 == phases_.size()) {
        const double pct =
            (static_cast<double>(step_num) - start_step) / (phase.end_step - start_step);
        lr = anneal(group.number(phase.start_lr), group.number(phase.end_lr), pct);
        if (options_.cycle_momentum)
          momentum =
              anneal(group.number(phase.start_momentum), group.number(phase.end_momentum), pct);
        break;
      }
      start_step = phase.end_step;
    }
    lrs.push_back(lr);
    if (options_.cycle_momentum) {
      if (use_beta1_)
        group.options["betas"][0] = momentum;
      else
        group.options["momentum"] = momentum;
    }
  }
  return lrs;
}

nlohmann::json OneCycleLR::hyperparameters() const {
  const OneCycleLROptions& o = options_;
  return {{"max_lr", o.max_lr},
          {"total_steps", o.total_steps},
          {"pct_start", o.pct_start},
          {"anneal_strategy", o.anneal_strategy},
          {"cycle_momentum", o.cycle_momentum},
          {"base_momentum", o.base_momentum},
          {"max_momentum", o.max_momentum},
          {"div_factor", o.div_factor},
          {"final_div_factor", o.final_div_factor},
          {"three_phase", o.three_phase},
          {"use_beta1", use_beta1_}};
}
void OneCycleLR::set_hyperparameters(const nlohmann::json& h) {
  OneCycleLROptions o;
  o.max_lr = h.at("max_lr").get<std::vector<double>>();
  o.total_steps = h.at("total_steps").get<int64_t>();
  o.pct_start = h.at("pct_start").get<double>();
  o.anneal_strategy = h.at("anneal_strategy").get<std::string>();
  o.cycle_momentum = h.at("cycle_momentum").get<bool>();
  o.base_momentum = h.at("base_momentum").get<double>();
  o.max_momentum = h.at("max_momentum").get<double>();
  o.div_factor = h.at("div_factor").get<double>();
  o.final_div_factor = h.at("final_div_factor").get<double>();
  o.three_phase = h.at("three_phase").get<bool>();
  use_beta1_ = h.at("use_beta1").get<bool>();
  options_ = std::move(o);
  make_phases();
}

// --- ReduceLROnPlateau
// ----------------------------------------------------------------------------

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options,
                                     const Loc& loc)
    : optimizer_(optimizer), options_(std::move(options)) {
  check_options(loc);
  min_lrs_ = per_group(options_.min_lr, optimizer.param_groups().size(), "ReduceLROnPlateau",
                       "min_lr", loc);
  best_ = options_.mode == "min" ? std::numeric_limits<double>::infinity()
                                 : -std::numeric_limits<double>::infinity();
  for (const auto& g : optimizer.param_groups()) last_lr_.push_back(g.lr());
}

void ReduceLROnPlateau::check_options(const Loc& loc) const {
  const char* op = "ReduceLROnPlateau";
  if (!(options_.factor < 1.0)) fail(op, loc, "expected factor < 1, but got {}", options_.factor);
  if (options_.mode != "min" && options_.mode != "max")
    fail(op, loc, "expected mode \"min\" or \"max\", but got \"{}\"", options_.mode);
  if (options_.threshold_mode != "rel" && options_.threshold_mode != "abs")
    fail(op, loc, "expected threshold_mode \"rel\" or \"abs\", but got \"{}\"",
         options_.threshold_mode);
}

bool ReduceLROnPlateau::is_better(double a, double best) const {
  const double t = options_.threshold;
  if (options_.mode == "min")
    return options_.threshold_mode == "rel" ? a < best * (1. - t) : a < best - t;
  return options_.threshold_mode == "rel" ? a > best * (t + 1.) : a > best + t;
}

void ReduceLROnPlateau::step(double metric) {
  last_epoch_ += 1;
  if (is_better(metric, best_)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    num_bad_epochs_ += 1;
  }
  if (in_cooldown()) {
    cooldown_counter_ -= 1;
    num_bad_epochs_ = 0;  // bad epochs during cooldown do not count
  }
  auto& groups = optimizer_.param_groups();
  if (num_bad_epochs_ > options_.patience) {
    for (size_t i = 0; i < groups.size() && i < min_lrs_.size(); ++i) {
      const double old_lr = groups[i].lr();
      const double new_lr = std::max(old_lr * options_.factor, min_lrs_[i]);
      if (old_lr - new_lr > options_.eps) groups[i].set_lr(new_lr);
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
  last_lr_.clear();
  for (const auto& g : groups) last_lr_.push_back(g.lr());
}

nlohmann::json ReduceLROnPlateau::state_dict() const {
  const ReduceLROnPlateauOptions& o = options_;
  return {{"scheduler", "ReduceLROnPlateau"},
          {"mode", o.mode},
          {"factor", o.factor},
          {"patience", o.patience},
          {"threshold", o.threshold},
          {"threshold_mode", o.threshold_mode},
          {"cooldown", o.cooldown},
          {"min_lrs", min_lrs_},
          {"eps", o.eps},
          {"best", number_to_json(best_)},
          {"num_bad_epochs", num_bad_epochs_},
          {"cooldown_counter", cooldown_counter_},
          {"last_epoch", last_epoch_},
          {"last_lr", last_lr_}};
}

void ReduceLROnPlateau::load_state_dict(const nlohmann::json& s, const Loc& loc) {
  const char* op = "ReduceLROnPlateau.load_state_dict";
  if (!s.is_object() || s.value("scheduler", "") != "ReduceLROnPlateau")
    fail(op, loc, "expected a state dict of ReduceLROnPlateau, but got {}",
         s.is_object() && s.contains("scheduler") ? s["scheduler"].dump() : s.dump());
  ReduceLROnPlateauOptions o;
  std::vector<double> min_lrs, last_lr;
  double best = 0;
  int64_t bad = 0, cooldown_counter = 0, last_epoch = 0;
  try {
    o.mode = s.at("mode").get<std::string>();
    o.factor = s.at("factor").get<double>();
    o.patience = s.at("patience").get<int64_t>();
    o.threshold = s.at("threshold").get<double>();
    o.threshold_mode = s.at("threshold_mode").get<std::string>();
    o.cooldown = s.at("cooldown").get<int64_t>();
    o.eps = s.at("eps").get<double>();
    min_lrs = s.at("min_lrs").get<std::vector<double>>();
    last_lr = s.at("last_lr").get<std::vector<double>>();
    best = number_from_json(s.at("best"));
    bad = s.at("num_bad_epochs").get<int64_t>();
    cooldown_counter = s.at("cooldown_counter").get<int64_t>();
    last_epoch = s.at("last_epoch").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    fail(op, loc, "expected ReduceLROnPlateau's fields, but got {} ({})", s.dump(), e.what());
  }
  if (min_lrs.size() != optimizer_.param_groups().size())
    fail(op, loc, "expected min_lrs for {} param groups, but got {}",
         optimizer_.param_groups().size(), min_lrs.size());
  std::swap(options_, o);
  try {
    check_options(loc);
  } catch (...) {
    std::swap(options_, o);
    throw;
  }
  options_.min_lr = min_lrs;
  min_lrs_ = std::move(min_lrs);
  last_lr_ = std::move(last_lr);
  best_ = best;
  num_bad_epochs_ = bad;
  cooldown_counter_ = cooldown_counter;
  last_epoch_ = last_epoch;
}

}  // namespace kiln::optim
