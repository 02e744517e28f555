#include "kiln/train/curves.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/io/atomic_file.h"

namespace kiln::train {
namespace {

// Page geometry in SVG user units.
constexpr double kWidth = 720.0;
constexpr double kPanelHeight = 320.0;
constexpr double kLeft = 80.0;     // data area's left edge (room for y tick labels)
constexpr double kRight = 690.0;   // data area's right edge
constexpr double kTop = 54.0;      // data area's top edge within a panel (room for the title)
constexpr double kBottom = 262.0;  // data area's bottom edge within a panel
constexpr double kInset = 10.0;    // frame drawn this far outside the data area
constexpr const char* kTrainColor = "#1f77b4";
constexpr const char* kValColor = "#ff7f0e";

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double v) {
  return fmt::format("{:.2f}", v);
}

struct Series {
  std::string key;
  const std::vector<double>* values;
  const char* color;
};

struct Panel {
  std::string metric;
  std::vector<Series> series;
};

std::string base_name(const std::string& key) {
  return key.size() > 4 && key.compare(0, 4, "val_") == 0 ? key.substr(4) : key;
}

std::vector<Panel> make_panels(const History& history) {
  std::vector<Panel> panels;
  auto find = [&](const std::string& metric) -> Panel& {
    for (auto& p : panels)
      if (p.metric == metric) return p;
    return panels.emplace_back(Panel{metric, {}});
  };
  for (const auto& [key, values] : history.metrics)
    if (!values.empty()) find(base_name(key));
  for (auto& panel : panels) {  // train series first, then validation
    for (const char* prefix : {"", "val_"}) {
      auto it = history.metrics.find(prefix + panel.metric);
      if (it != history.metrics.end() && !it->second.empty())
        panel.series.push_back({it->first, &it->second, *prefix ? kValColor : kTrainColor});
    }
  }
  std::stable_sort(panels.begin(), panels.end(), [](const Panel& a, const Panel& b) {
    return (a.metric == "loss") > (b.metric == "loss");
  });
  return panels;
}

// A step of 1, 2 or 5 times a power of ten giving at most ~max_ticks ticks over span.
double nice_step(double span, int max_ticks) {
  const double raw = std::max(span / max_ticks, 1.0);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10.0 * p;
}

class PanelWriter {
 public:
  PanelWriter(const Panel& panel, const std::vector<double>& epochs, double offset)
      : panel_(panel), epochs_(epochs), offset_(offset) {
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& s : panel.series)
      for (double v : *s.values)
        if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    has_values_ = lo <= hi;
    if (!has_values_) lo = 0.0, hi = 1.0;
    if (lo == hi) {  // constant: centre it
      const double d = lo == 0.0 ? 1.0 : std::abs(lo) * 0.1;
      lo -= d, hi += d;
    }
    lo_ = lo, hi_ = hi;
    e_lo_ = epochs.front(), e_hi_ = epochs.back();
  }

  double x(double epoch) const {
    if (e_hi_ == e_lo_) return (kLeft + kRight) / 2;
    return kLeft + (epoch - e_lo_) / (e_hi_ - e_lo_) * (kRight - kLeft);
  }
  double y(double v) const {
    return offset_ + kBottom - (v - lo_) / (hi_ - lo_) * (kBottom - kTop);
  }

  void write(std::string& svg) const {
    const std::string name = escape(panel_.metric);
    svg += fmt::format(
        "<g class=\"panel\" data-metric=\"{}\" data-y-top=\"{}\" data-y-bottom=\"{}\" "
        "data-x-left=\"{}\" data-x-right=\"{}\">\n",
        name, num(offset_ + kTop), num(offset_ + kBottom), num(kLeft), num(kRight));
    svg += fmt::format(
        "<text class=\"title\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"16\" "
        "font-weight=\"bold\">{}</text>\n",
        num(kWidth / 2), num(offset_ + 26), name);
    svg += fmt::format(
        "<rect class=\"frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
        "stroke=\"#888\"/>\n",
        num(kLeft - kInset), num(offset_ + kTop - kInset), num(kRight - kLeft + 2 * kInset),
        num(kBottom - kTop + 2 * kInset));
    write_ticks(svg);
    for (const auto& s : panel_.series) write_series(svg, s);
    if (!has_values_)
      svg += fmt::format(
          "<text class=\"note\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#888\">no finite "
          "values</text>\n",
          num((kLeft + kRight) / 2), num(offset_ + (kTop + kBottom) / 2));
    write_legend(svg);
    svg += "</g>\n";
  }

 private:
  void write_ticks(std::string& svg) const {
    const double axis_y = offset_ + kBottom + kInset;
    for (int k = 0; k <= 4; ++k) {  // five y ticks spanning the data exactly
      const double v = lo_ + (hi_ - lo_) * k / 4.0;
      const double yy = y(v);
      svg += fmt::format(
          "<line class=\"grid\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#e5e5e5\"/>\n",
          num(kLeft - kInset), num(yy), num(kRight + kInset), num(yy));
      svg += fmt::format(
          "<text class=\"ytick\" x=\"{}\" y=\"{}\" text-anchor=\"end\" "
          "dominant-baseline=\"middle\">{}</text>\n",
          num(kLeft - kInset - 6), num(yy), escape(fmt::format("{:.4g}", v)));
    }
    const double step = nice_step(e_hi_ - e_lo_, 10);
    for (double e = std::ceil(e_lo_ / step) * step; e <= e_hi_ + 1e-9; e += step) {
      if (e < e_lo_) continue;
      const double xx = x(e);
      svg += fmt::format(
          "<line class=\"xtick-mark\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/>\n",
          num(xx), num(axis_y), num(xx), num(axis_y + 5));
      svg +=
          fmt::format("<text class=\"xtick\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                      num(xx), num(axis_y + 18), static_cast<int64_t>(std::llround(e)));
    }
    svg += fmt::format(
        "<text class=\"xlabel\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">epoch</text>\n",
        num((kLeft + kRight) / 2), num(axis_y + 38));
    const double mid = offset_ + (kTop + kBottom) / 2;
    svg += fmt::format(
        "<text class=\"ylabel\" x=\"16\" y=\"{}\" text-anchor=\"middle\" "
        "transform=\"rotate(-90 16 {})\">{}</text>\n",
        num(mid), num(mid), escape(panel_.metric));
  }

  void write_series(std::string& svg, const Series& s) const {
    svg += fmt::format("<g class=\"series\" data-key=\"{}\">\n", escape(s.key));
    const std::vector<double>& v = *s.values;
    const size_t n = std::min(v.size(), epochs_.size());
    size_t i = 0;
    while (i < n) {
      if (!std::isfinite(v[i])) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < n && std::isfinite(v[j])) ++j;
      if (j - i == 1) {
        svg += fmt::format(
            "<circle class=\"point\" cx=\"{}\" cy=\"{}\" r=\"3.5\" fill=\"{}\" "
            "data-epoch=\"{}\"/>\n",
            num(x(epochs_[i])), num(y(v[i])), s.color, epochs_[i]);
      } else {
        std::string points;
        for (size_t k = i; k < j; ++k)
          points += (points.empty() ? "" : " ") + num(x(epochs_[k])) + "," + num(y(v[k]));
        svg += fmt::format(
            "<polyline class=\"line\" points=\"{}\" fill=\"none\" stroke=\"{}\" "
            "stroke-width=\"2\" stroke-linejoin=\"round\"/>\n",
            points, s.color);
      }
      i = j;
    }
    svg += "</g>\n";
  }

  void write_legend(std::string& svg) const {
    // Above the frame's top-right corner, beside the title, so it never hides a curve.
    double yy = offset_ + 12;
    const double x0 = kRight - 140;
    svg += "<g class=\"legend\">\n";
    for (const auto& s : panel_.series) {
      svg += fmt::format(
          "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"3\"/>\n",
          num(x0), num(yy), num(x0 + 22), num(yy), s.color);
      svg += fmt::format(
          "<text class=\"legend-label\" x=\"{}\" y=\"{}\" dominant-baseline=\"middle\">{}</text>\n",
          num(x0 + 28), num(yy), escape(s.key));
      yy += 15;
    }
    svg += "</g>\n";
  }

  const Panel& panel_;
  const std::vector<double>& epochs_;
  double offset_;
  double lo_ = 0, hi_ = 1, e_lo_ = 1, e_hi_ = 1;
  bool has_values_ = false;
};

std::string render(const History& history, const char* op, const Loc& loc) {
  const std::vector<Panel> panels = make_panels(history);
  if (panels.empty())
    fail(op, loc, "expected a History with at least one epoch of metrics, but got an empty one");
  size_t length = 0;
  for (const auto& panel : panels)
    for (const auto& s : panel.series) length = std::max(length, s.values->size());
  std::vector<double> epochs;  // 1-based, as the progress output counts
  for (size_t i = 0; i < length; ++i)
    epochs.push_back(history.epoch.size() == length ? history.epoch[i] + 1.0
                                                    : static_cast<double>(i + 1));

  const double height = kPanelHeight * static_cast<double>(panels.size());
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<title>Training curves</title>\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
      num(kWidth), num(height));
  for (size_t p = 0; p < panels.size(); ++p)
    PanelWriter(panels[p], epochs, kPanelHeight * static_cast<double>(p)).write(svg);
  svg += "</svg>\n";
  return svg;
}

}  // namespace

std::string training_curves_svg(const History& history, const Loc& loc) {
  return render(history, "training_curves_svg", loc);
}

void write_training_curves(const History& history, const std::string& path, const Loc& loc) {
  const std::string svg = render(history, "write_training_curves", loc);
  io::write_file_atomic(
      path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(svg.data()), svg.size()),
      "write_training_curves", loc);
}

}  // namespace kiln::train
