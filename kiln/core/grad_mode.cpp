#include "kiln/core/grad_mode.h"

namespace kiln {

namespace {
thread_local bool grad_enabled = true;
thread_local bool anomaly_enabled = false;
}  // namespace

bool GradMode::is_enabled() {
  return grad_enabled;
}
void GradMode::set_enabled(bool enabled) {
  grad_enabled = enabled;
}
bool AnomalyMode::is_enabled() {
  return anomaly_enabled;
}
void AnomalyMode::set_enabled(bool enabled) {
  anomaly_enabled = enabled;
}

}  // namespace kiln
