// Predicts the class of an image with a saved-model bundle (`kiln export RUN --out BUNDLE`), in a
// program that contains no model code and links only the installed library (find_package(kiln)).
// The bundle's assets say how to prepare the image (data_info.json: channels, size, the
// normalization) and what the classes are called (classes.txt).
//   deploy_predict BUNDLE IMAGE [--top K]
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/io/saved_model.h"
#include "kiln/kiln.h"

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The image as the model's input [1, C, H, W]: decoded to the bundle's channels, in [0, 1], then
// normalized per channel as in training.
kiln::Tensor prepare(const std::string& path, const nlohmann::json& info) {
  if (info.value("kind", "") != "images")
    throw kiln::Error("the bundle's model reads " + info.value("kind", std::string("?")) +
                      ", not images");
  const int64_t channels = info.at("channels").get<int64_t>();
  const int64_t size = info.at("image_size").get<int64_t>();
  const kiln::Tensor pixels = kiln::data::decode_image(
      path, channels == 1 ? kiln::data::ImageMode::Gray : kiln::data::ImageMode::RGB);
  if (pixels.size(1) != size || pixels.size(2) != size)
    throw kiln::Error(fmt::format("{} is {}x{} pixels; the model reads {}x{} images", path,
                                  pixels.size(2), pixels.size(1), size, size));
  const std::vector<float> mean = info.at("mean").get<std::vector<float>>();
  const std::vector<float> std = info.at("std").get<std::vector<float>>();
  kiln::Tensor x = kiln::div(kiln::to_dtype(pixels, kiln::DType::Float32), 255.0);
  const kiln::Tensor m = kiln::tensor(mean, kiln::Shape{channels, 1, 1});
  const kiln::Tensor s = kiln::tensor(std, kiln::Shape{channels, 1, 1});
  return kiln::unsqueeze(kiln::div(kiln::sub(x, m), s), 0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 5 && std::string(argv[3]) == "--top")) {
    std::cerr << "usage: deploy_predict BUNDLE IMAGE [--top K]\n";
    return 2;
  }
  try {
    const kiln::io::SavedModel model = kiln::io::load_model(argv[1]);
    const nlohmann::json info = nlohmann::json::parse(model.asset("data_info.json"));
    const std::vector<std::string> classes = lines_of(model.asset("classes.txt"));
    const int64_t top = argc == 5 ? std::stoll(argv[4]) : 3;

    kiln::NoGradGuard no_grad;
    const kiln::Tensor logits = model({prepare(argv[2], info)})[0];
    const std::vector<float> p = kiln::softmax(logits, 1).to_vector<float>();
    std::vector<size_t> order(p.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
    fmt::print("{} ({}, {}):\n", argv[2], model.info().producer, model.info().precision);
    for (size_t k = 0; k < std::min<size_t>(static_cast<size_t>(top), order.size()); ++k) {
      const size_t c = order[k];
      fmt::print("  {:>6.2f} %  {}\n", 100.0 * p[c],
                 c < classes.size() ? classes[c] : fmt::format("class {}", c));
    }
  } catch (const std::exception& e) {
    std::cerr << "deploy_predict: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
