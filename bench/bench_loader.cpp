// kiln's DataLoader on Fashion-MNIST with crop + flip augmentation: samples/s over full epochs.
// Its twin is bench/torch_loader.py (PyTorch's DataLoader, the same transforms written with
// torch ops per sample); bench/compare_loader.sh runs both and prints the ratio.
//
//   kiln_bench_loader [--workers=2] [--epochs=3] [--batch=128] [--threads=N]
//                     [--data=/usr/share/datasets/fashion-mnist] [--breakdown]
//
// Pipeline (per sample, as torchvision's ToTensor, RandomCrop(28, padding=4),
// RandomHorizontalFlip(), Normalize((0.2860,), (0.3530,))): uint8 [1, 28, 28] -> float32 / 255,
// zero-pad 4 and crop 28x28 at a random offset, flip with probability 1/2, normalize. Batches of
// 128, shuffled, `workers` threads (0: everything in the calling thread). Every batch is touched
// (its sum is accumulated into a checksum) so that nothing is skipped. Reading and decompressing
// the IDX files is not timed. Prints one JSON object on stdout; the figure is the median over the
// epochs of samples / epoch wall time.
//
// --breakdown additionally times each stage on its own over every sample in the calling thread
// (CPU microseconds per sample), and a fused one-pass prototype of the same transform, to show
// where a loader's time goes.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/kiln.h"

namespace {

using kiln::Tensor;
using kiln::data::Example;
using kiln::data::SampleContext;
using Clock = std::chrono::steady_clock;

constexpr double kMean = 0.2860;
constexpr double kStd = 0.3530;

struct Args {
  int workers = 2;
  int epochs = 3;
  int64_t batch = 128;
  int threads = 0;  // 0: kiln's default
  std::string data = "/usr/share/datasets/fashion-mnist";
  bool breakdown = false;
};

[[noreturn]] void usage(const std::string& bad) {
  std::fprintf(stderr,
               "kiln_bench_loader: unknown or malformed argument '%s'\n"
               "usage: kiln_bench_loader [--workers=W] [--epochs=N] [--batch=B] [--threads=T] "
               "[--data=DIR] [--breakdown]\n",
               bad.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    auto value = [&](std::string_view key) -> const char* {
      if (!arg.starts_with(key) || arg.size() <= key.size()) return nullptr;
      return argv[i] + key.size();
    };
    if (const char* v = value("--workers="))
      a.workers = std::atoi(v);
    else if (const char* v = value("--epochs="))
      a.epochs = std::atoi(v);
    else if (const char* v = value("--batch="))
      a.batch = std::atoll(v);
    else if (const char* v = value("--threads="))
      a.threads = std::atoi(v);
    else if (const char* v = value("--data="))
      a.data = v;
    else if (arg == "--breakdown")
      a.breakdown = true;
    else
      usage(std::string(arg));
  }
  if (a.workers < 0 || a.epochs < 1 || a.batch < 1) usage("(a value out of range)");
  return a;
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string one, five, fifteen;
  f >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// CPU seconds used so far by every thread of this process (the loader's workers are threads).
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

kiln::data::Compose augmentation() {
  return kiln::data::Compose({kiln::data::ToFloat{}, kiln::data::RandomCrop(28, 4),
                              kiln::data::RandomHorizontalFlip(0.5),
                              kiln::data::Normalize({kMean}, {kStd})});
}

// CPU seconds of the calling thread: the breakdown's unit, so that other load on the machine
// (which stretches wall time) does not inflate it.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// A prototype, not kiln API: ToFloat + RandomCrop(28, 4) + RandomHorizontalFlip + Normalize as
// one pass from uint8 into one float32 allocation, with the draws of augmentation()'s stages
// (Compose streams 2 and 3), so its output equals the Compose's bit for bit. It shows what the
// per-sample op chain costs compared with the arithmetic it does.
Tensor fused_augment(const Tensor& x, const SampleContext& ctx) {
  constexpr int64_t kSize = 28, kPad = 4;
  const int64_t h = x.size(-2), w = x.size(-1);
  SampleContext crop_ctx = ctx, flip_ctx = ctx;
  crop_ctx.stream = ctx.stream * 64 + 2;
  flip_ctx.stream = ctx.stream * 64 + 3;
  const auto bits = kiln::data::sample_bits(crop_ctx);
  const int64_t top =
      kiln::data::bounded_int(bits[0], static_cast<uint64_t>(h + 2 * kPad - kSize + 1));
  const int64_t left =
      kiln::data::bounded_int(bits[1], static_cast<uint64_t>(w + 2 * kPad - kSize + 1));
  const bool flip = kiln::data::uniform01(kiln::data::sample_bits(flip_ctx)[0]) < 0.5;
  const Tensor input = x.contiguous();  // [1, 28, 28] uint8: the output has the same shape
  Tensor out = kiln::empty_like(input, kiln::DType::Float32);
  const uint8_t* src = input.data<uint8_t>();
  float* dst = out.data<float>();
  const auto mean = static_cast<float>(kMean), stdev = static_cast<float>(kStd);
  for (int64_t i = 0; i < kSize; ++i) {
    const int64_t si = top + i - kPad;
    for (int64_t j = 0; j < kSize; ++j) {
      const int64_t sj = left + (flip ? kSize - 1 - j : j) - kPad;
      const bool inside = si >= 0 && si < h && sj >= 0 && sj < w;
      const float v = inside ? static_cast<float>(src[si * w + sj]) / 255.0f : 0.0f;
      dst[i * kSize + j] = (v - mean) / stdev;
    }
  }
  return out;
}

// Times every stage on its own over all samples (calling thread, no workers): CPU microseconds
// per sample for each stage, the whole transform, collation of full batches, and the fused
// prototype above (checked equal to the Compose's output).
void breakdown(const std::shared_ptr<kiln::data::TensorDataset>& base, int64_t batch) {
  kiln::NoGradGuard no_grad;
  const int64_t n = base->size();
  kiln::data::ToFloat to_float;
  kiln::data::RandomCrop crop(28, 4);
  kiln::data::RandomHorizontalFlip flip(0.5);
  kiln::data::Normalize normalize({kMean}, {kStd});
  kiln::data::Compose all = augmentation();
  // Stage inputs as they arrive in the pipeline (uint8 row -> float -> cropped -> flipped).
  std::vector<Tensor> rows, floats, cropped, flipped, composed;
  double checksum = 0;
  auto stage = [&](const char* name, auto&& fn) {
    const double t0 = thread_cpu_seconds();
    for (int64_t i = 0; i < n; ++i) fn(i, SampleContext{0, 0, i, 0});
    const double us = (thread_cpu_seconds() - t0) / static_cast<double>(n) * 1e6;
    std::printf("    \"%s\": %.3f,\n", name, us);
  };
  auto at = [](std::vector<Tensor>& v, int64_t i) -> Tensor& { return v[static_cast<size_t>(i)]; };
  std::printf("  \"breakdown_cpu_us_per_sample\": {\n");
  stage("get_sample (row view)",
        [&](int64_t i, const SampleContext& c) { rows.push_back(base->get_sample(i, c).data); });
  stage("ToFloat",
        [&](int64_t i, const SampleContext& c) { floats.push_back(to_float(at(rows, i), c)); });
  stage("RandomCrop(28, 4)",
        [&](int64_t i, const SampleContext& c) { cropped.push_back(crop(at(floats, i), c)); });
  stage("RandomHorizontalFlip",
        [&](int64_t i, const SampleContext& c) { flipped.push_back(flip(at(cropped, i), c)); });
  stage("Normalize", [&](int64_t i, const SampleContext& c) {
    checksum += static_cast<double>(normalize(at(flipped, i), c).numel());
  });
  stage("Compose of all four",
        [&](int64_t i, const SampleContext& c) { composed.push_back(all(at(rows, i), c)); });
  double max_diff = 0;
  stage("fused prototype (one pass, one allocation)", [&](int64_t i, const SampleContext& c) {
    Tensor f = fused_augment(at(rows, i), c);
    if (i % 97 == 0)  // spot checks, outside the hot path's cost in practice
      max_diff = std::max(max_diff, kiln::max(kiln::abs(kiln::sub(f, at(composed, i)))).item());
  });
  // Collation of full batches of transformed samples, per sample.
  const double t0 = thread_cpu_seconds();
  int64_t collated = 0;
  for (int64_t b = 0; b + batch <= n; b += batch) {
    std::vector<Example> samples;
    for (int64_t i = b; i < b + batch; ++i) samples.push_back(Example{at(composed, i), Tensor()});
    checksum += static_cast<double>(kiln::data::default_collate(std::move(samples)).data.numel());
    collated += batch;
  }
  std::printf("    \"default_collate (stack)\": %.3f\n  },\n",
              (thread_cpu_seconds() - t0) / static_cast<double>(collated) * 1e6);
  std::printf("  \"fused_prototype_max_abs_diff\": %.3g,\n", max_diff);
  std::fprintf(stderr, "breakdown checksum %g\n", checksum);
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  if (args.threads > 0) kiln::set_num_threads(args.threads);

  // uint8 images [N, 1, 28, 28] and int64 labels, decoded once, outside the timing.
  Tensor images = kiln::data::read_idx(args.data + "/train-images-idx3-ubyte.gz");
  Tensor labels = kiln::data::read_idx(args.data + "/train-labels-idx1-ubyte.gz");
  const int64_t n = images.size(0);
  images = images.reshape(kiln::Shape{n, 1, images.size(1), images.size(2)}).contiguous();
  auto base = std::make_shared<kiln::data::TensorDataset>(images, labels.to(kiln::DType::Int64));
  auto dataset = std::make_shared<kiln::data::TransformDataset>(base, augmentation());
  kiln::data::DataLoader loader(
      dataset,
      kiln::data::DataLoaderOptions{
          .batch_size = args.batch, .shuffle = true, .num_workers = args.workers, .seed = 0});

  const std::string load_before = loadavg();
  std::vector<double> epoch_s, epoch_cpu_s;
  double checksum = 0;
  int64_t samples = 0;
  for (int e = 0; e < args.epochs; ++e) {
    samples = 0;
    auto t0 = Clock::now();
    double cpu0 = cpu_seconds();
    for (const Example& batch : loader) {
      checksum += kiln::sum(batch.data).item() + kiln::sum(batch.target).item();
      samples += batch.data.size(0);
    }
    epoch_s.push_back(seconds_since(t0));
    epoch_cpu_s.push_back(cpu_seconds() - cpu0);
  }
  const std::string load_after = loadavg();
  const double med = median(epoch_s);

  std::printf("{\n  \"framework\": \"kiln\",\n  \"workers\": %d,\n  \"batch_size\": %lld,\n",
              args.workers, static_cast<long long>(args.batch));
  std::printf("  \"kiln_threads\": %d,\n  \"samples_per_epoch\": %lld,\n", kiln::get_num_threads(),
              static_cast<long long>(samples));
  std::printf("  \"epoch_seconds\": [");
  for (size_t i = 0; i < epoch_s.size(); ++i) std::printf("%s%.4f", i ? ", " : "", epoch_s[i]);
  std::printf("],\n  \"median_epoch_seconds\": %.4f,\n", med);
  std::printf("  \"median_epoch_cpu_seconds\": %.4f,\n", median(epoch_cpu_s));
  std::printf("  \"samples_per_second\": %.1f,\n", static_cast<double>(samples) / med);
  if (args.breakdown) breakdown(base, args.batch);
  std::printf("  \"checksum\": %.6g,\n", checksum);
  std::printf("  \"loadavg_before\": \"%s\",\n  \"loadavg_after\": \"%s\"\n}\n",
              load_before.c_str(), load_after.c_str());
  return 0;
}
