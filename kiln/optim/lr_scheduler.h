#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

// Base of the epoch-driven schedulers (torch.optim.lr_scheduler semantics, PyTorch 1.13): each
// step() advances last_epoch and writes new learning rates into the optimizer's groups ("lr").
// Construction already performs the first step (last_epoch -1 -> 0), as in PyTorch, and records
// each group's starting lr as its "initial_lr" option. Call optimizer.step() before
// scheduler.step().
//
// The rates come from PyTorch's chainable (recursive) formulas, evaluated in the same order, so
// the sequences agree with PyTorch's to the last bit or so, and schedulers compose with other
// writers of "lr" the way PyTorch's do.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  virtual const char* name() const = 0;
  void step(const Loc& loc = Loc::current());
  // The learning rate of every group after the latest step.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  // Counters and hyperparameters as JSON; load_state_dict checks the scheduler type.
  nlohmann::json state_dict() const;
  void load_state_dict(const nlohmann::json& state, const Loc& loc = Loc::current());

 protected:
  // last_epoch == -1 starts fresh; otherwise the groups must already have "initial_lr" (resume).
  LRScheduler(Optimizer& optimizer, int64_t last_epoch, const Loc& loc);
  // Derived constructors call this last (the first step needs their get_lr()).
  void initial_step(const Loc& loc);
  // The new lr of every group, from the current group lrs and last_epoch_ (already advanced).
  virtual std::vector<double> get_lr(const Loc& loc) = 0;
  virtual nlohmann::json hyperparameters() const = 0;
  virtual void set_hyperparameters(const nlohmann::json& h) = 0;

  std::vector<double> group_lrs() const;

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_;
  int64_t step_count_ = 0;
  std::vector<double> last_lr_;
};

// lr *= gamma every step_size epochs.
class StepLR final : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1, int64_t last_epoch = -1,
         const Loc& loc = Loc::current());
  const char* name() const override { return "StepLR"; }

 protected:
  std::vector<double> get_lr(const Loc& loc) override;
  nlohmann::json hyperparameters() const override;
  void set_hyperparameters(const nlohmann::json& h) override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr *= gamma at each milestone epoch (a milestone listed twice decays twice).
class MultiStepLR final : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1,
              int64_t last_epoch = -1, const Loc& loc = Loc::current());
  const char* name() const override { return "MultiStepLR"; }

 protected:
  std::vector<double> get_lr(const Loc& loc) override;
  nlohmann::json hyperparameters() const override;
  void set_hyperparameters(const nlohmann::json& h) override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

// lr *= gamma every epoch.
class ExponentialLR final : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma, int64_t last_epoch = -1,
                const Loc& loc = Loc::current());
  const char* name() const override { return "ExponentialLR"; }

 protected:
  std::vector<double> get_lr(const Loc& loc) override;
  nlohmann::json hyperparameters() const override;
  void set_hyperparameters(const nlohmann::json& h) override;

 private:
  double gamma_;
};

// Cosine annealing from the base lr to eta_min over T_max epochs (then back up, periodically),
// with PyTorch's recursive formula.
class CosineAnnealingLR final : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0,
                    int64_t last_epoch = -1, const Loc& loc = Loc::current());
  const char* name() const override { return "CosineAnnealingLR"; }

 protected:
  std::vector<double> get_lr(const Loc& loc) override;
  nlohmann::json hyperparameters() const override;
  void set_hyperparameters(const nlohmann::json& h) override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// Linear warmup (or decay) of the lr factor from start_factor to end_factor over total_iters.
class LinearLR final : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0,
           int64_t total_iters = 5, int64_t last_epoch = -1, const Loc& loc = Loc::current());
  const char* name() const override { return "LinearLR"; }

 protected:
  std::vector<double> get_lr(const Loc& loc) override;
  nlohmann::json hyperparameters() const override;
  void set_hyperparameters(const nlohmann::json& h) override;

 private:
  double start_factor_;
  double end_factor_;
  int64_t total_iters_;
};

struct OneCycleLROptions {
  std::vector<double> max_lr = {};  // required: one value for every group, or one per group
  int64_t total_steps = 0;          // required
  double pct_start = 0.3;
  std::string anneal_strategy = "cos";  // "cos" or "linear"
  bool cycle_momentum = true;  // writes "momentum" (SGD, RMSprop) or betas[0] (Adam, AdamW)
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25.0;       // initial_lr = max_lr / div_factor
  double final_div_factor = 1e4;  // min_lr = initial_lr / final_div_factor
  bool three_phase = false;
};

// The 1cycle policy: lr rises from initial_lr to max_lr over pct_start of total_steps, then
// anneals to min_lr (momentum moves the opposite way), reaching it at step total_steps - 1; one
// step further is tolerated and any more is an error, as in PyTorch.
class OneCycleLR final : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, OneCycleLROptions options, int64_t last_epoch = -1,
             const Loc& loc = Loc::current());
  const char* name() const override { return "OneCycleLR"; }

 protected:
  std::vector<double> get_lr(const Loc& loc) override;
  nlohmann::json hyperparameters() const override;
  void set_hyperparameters(const nlohmann::json& h) override;

 private:
  struct Phase {
    double end_step;
    std::string start_lr, end_lr, start_momentum, end_momentum;  // group option names
  };
  void make_phases();
  double anneal(double start, double end, double pct) const;
  OneCycleLROptions options_;
  bool use_beta1_ = false;
  std::vector<Phase> phases_;
};

struct ReduceLROnPlateauOptions {
  std::string mode = "min";  // "min": lower metric is better; "max": higher is better
  double factor = 0.1;       // new_lr = max(lr * factor, min_lr); must be < 1
  int64_t patience = 10;     // bad epochs tolerated before reducing
  double threshold = 1e-4;
  std::string threshold_mode = "rel";  // "rel" or "abs"
  int64_t cooldown = 0;                // epochs to wait after a reduction
  std::vector<double> min_lr = {0.0};  // one value for every group, or one per group
  double eps = 1e-8;                   // reductions smaller than eps are skipped
};

// Reduces the lr when a metric stops improving (torch.optim.lr_scheduler.ReduceLROnPlateau).
// Driven by step(metric) instead of epochs, so it is not an LRScheduler.
class ReduceLROnPlateau {
 public:
  explicit ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options = {},
                             const Loc& loc = Loc::current());
  ReduceLROnPlateau(const ReduceLROnPlateau&) = delete;
  ReduceLROnPlateau& operator=(const ReduceLROnPlateau&) = delete;

  void step(double metric);
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  bool in_cooldown() const { return cooldown_counter_ > 0; }

  nlohmann::json state_dict() const;
  void load_state_dict(const nlohmann::json& state, const Loc& loc = Loc::current());

 private:
  bool is_better(double a, double best) const;
  void check_options(const Loc& loc) const;

  Optimizer& optimizer_;
  ReduceLROnPlateauOptions options_;
  std::vector<double> min_lrs_;
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
  int64_t last_epoch_ = 0;
  std::vector<double> last_lr_;
};

}  // namespace kiln::optim
