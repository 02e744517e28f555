#pragma once
#include <string>

#include "kiln/core/tensor.h"
#include "kiln/train/fit.h"

namespace kiln::train {

// Note [training curves]
// ~~~~~~~~~~~~~~~~~~~~~~
// One standalone SVG (no scripts, no external resources) with one panel per metric base name,
// stacked vertically: "loss" first, then the others in name order ("accuracy", "lr", ...). A
// panel plots the train series (<name>) and the validation series (val_<name>) that exist, over
// the epochs (1-based; History::epoch when it matches the series, else 1, 2, ...), with a
// title, axes, tick labels, grid lines and a legend. Each panel is a <g class="panel"
// data-metric="<name>"> whose data-y-top / data-y-bottom / data-x-left / data-x-right give the
// data area: a panel's largest finite value lies exactly at data-y-top, its smallest at
// data-y-bottom, the first epoch at data-x-left and the last at data-x-right (a lone epoch or a
// constant series sits in the middle). Each series is a <g class="series" data-key="<key>">
// holding a <polyline> per run of consecutive finite values and a <circle> per finite value
// with no finite neighbour, so NaN and infinite values leave gaps and a single epoch is a dot.

// The SVG document write_training_curves writes. An empty history (no metric with a value) is
// an Error.
std::string training_curves_svg(const History& history, const Loc& loc = Loc::current());

// Writes training_curves_svg(history) to `path` atomically (kiln/io/atomic_file.h); errors name
// the path.
void write_training_curves(const History& history, const std::string& path,
                           const Loc& loc = Loc::current());

}  // namespace kiln::train
