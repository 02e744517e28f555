// Trains a two-layer MLP on Fashion-MNIST with raw kiln ops, autograd and plain SGD, then reports
// the test accuracy and saves the weights. Usage:
//   mlp_fashion_mnist [--data DIR] [--epochs N] [--batch B] [--lr LR] [--seed S] [--out DIR]
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>

#include "kiln/kiln.h"

namespace {

using namespace kiln;

struct Args {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string out = "out/mlp";
  int epochs = 1;
  int64_t batch = 64;
  double lr = 0.1;
  uint64_t seed = 0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (i + 1 >= argc) throw Error("[mlp_fashion_mnist] flag " + k + " needs a value");
    std::string v = argv[++i];
    if (k == "--data")
      a.data = v;
    else if (k == "--out")
      a.out = v;
    else if (k == "--epochs")
      a.epochs = std::stoi(v);
    else if (k == "--batch")
      a.batch = std::stoll(v);
    else if (k == "--lr")
      a.lr = std::stod(v);
    else if (k == "--seed")
      a.seed = std::stoull(v);
    else
      throw Error("[mlp_fashion_mnist] unknown flag " + k +
                  " (known: --data --out --epochs --batch --lr --seed)");
  }
  return a;
}

// Images as float32 [N, 784] normalized with Fashion-MNIST's mean and std; labels int64 [N].
std::pair<Tensor, Tensor> load(const std::string& dir, const std::string& split) {
  Tensor images = data::read_idx(dir + "/" + split + "-images-idx3-ubyte.gz");
  Tensor labels = data::read_idx(dir + "/" + split + "-labels-idx1-ubyte.gz");
  Tensor x = to_dtype(images, DType::Float32).reshape({images.size(0), -1});
  x = div(sub(div(x, 255.0), 0.2860), 0.3530);
  return {x, to_dtype(labels, DType::Int64)};
}

// Keras-like progress line: [=====>....] step/total - loss - samples/s.
void progress(int64_t step, int64_t total, double loss, double seconds, int64_t samples) {
  static const bool tty = isatty(fileno(stdout));
  if (!tty && step != total && step % 100 != 0) return;
  const int width = 30;
  int filled = static_cast<int>(width * step / total);
  std::string bar(filled, '=');
  if (filled < width) bar += '>' + std::string(width - filled - 1, '.');
  double eta = step ? seconds / step * (total - step) : 0;
  std::printf("%s%lld/%lld [%s] - %.0fs - ETA %.0fs - loss: %.4f - %.0f samples/s%s",
              tty ? "\r" : "", static_cast<long long>(step), static_cast<long long>(total),
              bar.c_str(), seconds, eta, loss, samples / std::max(seconds, 1e-9), tty ? "" : "\n");
  std::fflush(stdout);
}

// Writes float32 tensors in the safetensors layout (8-byte little-endian header length, JSON header
// with dtype, shape and data offsets, then the raw data), which PyTorch and numpy users can read.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string blob;
  for (const auto& [name, t] : tensors) {
    std::vector<float> v = t.to_vector<float>();
    size_t begin = blob.size();
    blob.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    header[name] = {{"dtype", "F32"}, {"shape", t.shape()}, {"data_offsets", {begin, blob.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t len = text.size();
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&len), 8);
  f << text << blob;
  if (!f) throw Error("[save_safetensors] could not write '" + path + "'");
}

}  // namespace

int main(int argc, char** argv) try {
  Args args = parse(argc, argv);
  manual_seed(args.seed);
  auto [train_x, train_y] = load(args.data, "train");
  auto [test_x, test_y] = load(args.data, "t10k");
  std::printf("Fashion-MNIST: %lld training and %lld test images, %d threads\n",
              static_cast<long long>(train_x.size(0)), static_cast<long long>(test_x.size(0)),
              get_num_threads());

  // PyTorch's nn.Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases.
  auto uniform = [](Shape shape, int64_t fan_in) {
    double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    return sub(mul(rand(shape), 2 * bound), bound).detach().set_requires_grad(true);
  };
  const int64_t hidden = 256;
  Tensor w1 = uniform({784, hidden}, 784), b1 = uniform({hidden}, 784);
  Tensor w2 = uniform({hidden, 10}, hidden), b2 = uniform({10}, hidden);
  std::vector<Tensor> params = {w1, b1, w2, b2};

  const int64_t n = train_x.size(0);
  const int64_t steps = n / args.batch;
  for (int epoch = 1; epoch <= args.epochs; ++epoch) {
    std::printf("Epoch %d/%d\n", epoch, args.epochs);
    // Shuffle: sort the indices by random keys from kiln's seeded generator.
    Tensor order = randint(0, int64_t{1} << 40, {n});
    std::vector<int64_t> keys = order.to_vector<int64_t>(), idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(),
              [&](int64_t a, int64_t b) { return keys[a] != keys[b] ? keys[a] < keys[b] : a < b; });
    auto start = std::chrono::steady_clock::now();
    double running = 0;
    for (int64_t s = 0; s < steps; ++s) {
      std::vector<int64_t> rows(idx.begin() + s * args.batch, idx.begin() + (s + 1) * args.batch);
      Tensor batch_idx = tensor(rows);
      Tensor x = index_select(train_x, 0, batch_idx);
      Tensor y = index_select(train_y, 0, batch_idx);
      Tensor logits = add(matmul(relu(add(matmul(x, w1), b1)), w2), b2);
      Tensor loss = cross_entropy(logits, y);
      loss.backward();
      {
        NoGradGuard no_grad;
        for (Tensor& p : params) {
          p.sub_(mul(p.grad(), args.lr));
          p.set_grad(Tensor());
        }
      }
      running = s == 0 ? loss.item() : 0.98 * running + 0.02 * loss.item();
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      progress(s + 1, steps, running, secs, (s + 1) * args.batch);
    }
    std::printf("\n");
  }

  NoGradGuard no_grad;
  Tensor logits = add(matmul(relu(add(matmul(test_x, w1), b1)), w2), b2);
  double accuracy = mean(to_dtype(eq(argmax(logits, 1), test_y), DType::Float32)).item();
  std::printf("test accuracy: %.2f%%\n", 100 * accuracy);

  std::filesystem::create_directories(args.out);
  std::string path = args.out + "/mlp.safetensors";
  save_safetensors(path,
                   {{"fc1.weight", w1}, {"fc1.bias", b1}, {"fc2.weight", w2}, {"fc2.bias", b2}});
  std::printf("saved weights to %s\n", path.c_str());
  return accuracy >= 0.80 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 2;
}
