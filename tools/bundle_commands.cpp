#include "tools/bundle_commands.h"

#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <optional>

#include "kiln/io/npy.h"
#include "kiln/io/npz.h"
#include "kiln/io/saved_model.h"
#include "kiln/kiln.h"
#include "kiln/train/precision.h"
#include "tools/datasets.h"
#include "tools/run_dir.h"

namespace kiln::cli {

namespace fs = std::filesystem;

namespace {

std::string shape_tuple(const graph::SymShape& shape, bool symbols) {
  std::vector<std::string> dims;
  for (const graph::Dim& d : shape)
    dims.push_back(!d.is_symbolic() ? std::to_string(d.size) : symbols ? d.symbol : "-1");
  if (dims.size() == 1) return "(" + dims[0] + ",)";
  return fmt::format("({})", fmt::join(dims, ", "));
}

void print_tensor_info(const char* kind, const io::TensorInfo& t) {
  std::cout << fmt::format("    {}['{}'] tensor_info:\n", kind, t.name);
  std::cout << fmt::format("        dtype: {}\n", dtype_name(t.dtype));
  std::cout << fmt::format("        shape: {}\n", shape_tuple(t.shape, false));
  bool symbolic = false;
  for (const graph::Dim& d : t.shape) symbolic |= d.is_symbolic();
  if (symbolic) std::cout << fmt::format("        dims: {}\n", shape_tuple(t.shape, true));
}

std::string lower_extension(const std::string& path) {
  std::string e = fs::path(path).extension().string();
  for (char& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

// The arrays --input names, by signature input.
std::vector<std::pair<std::string, Tensor>> read_inputs(const RunArgs& a,
                                                        const io::SignatureDef& sig) {
  std::vector<std::pair<std::string, Tensor>> out;
  std::map<std::string, std::string> from;  // input -> where it came from
  auto add = [&](const std::string& name, Tensor t, const std::string& where) {
    if (auto it = from.find(name); it != from.end())
      throw Error(fmt::format("[kiln run] the input '{}' is given twice ({} and {})", name,
                              it->second, where));
    from.emplace(name, where);
    out.emplace_back(name, std::move(t));
  };
  for (const std::string& spec : a.inputs) {
    const size_t eq = spec.find('=');
    const std::string path = eq == std::string::npos ? spec : spec.substr(eq + 1);
    const std::string ext = lower_extension(path);
    if (eq != std::string::npos) {
      if (ext != ".npy")
        throw Error(fmt::format(
            "[kiln run] --input {}: NAME=FILE takes a .npy file (a .npz names its arrays itself: "
            "pass it as --input FILE.npz)",
            spec));
      add(spec.substr(0, eq), io::read_npy(path), path);
    } else if (ext == ".npz") {
      for (auto& [name, t] : io::read_npz(path))
        add(name, std::move(t), path + ":" + name + ".npy");
    } else if (ext == ".npy") {
      if (sig.inputs.size() != 1)
        throw Error(fmt::format(
            "[kiln run] --input {}: signature '{}' has {} inputs, so name each one (--input "
            "NAME=FILE.npy) or pass a .npz holding them",
            spec, sig.name, sig.inputs.size()));
      add(sig.inputs[0].name, io::read_npy(path), path);
    } else {
      throw Error(
          fmt::format("[kiln run] --input {}: expected NAME=FILE.npy, FILE.npy or FILE.npz", spec));
    }
  }
  return out;
}

}  // namespace

bool is_bundle_dir(const std::string& dir) {
  return fs::is_regular_file(fs::path(dir) / "saved_model.json");
}

int run_export(const ExportArgs& a) {
  const std::string ckpt = (fs::path(a.dir) / "checkpoint").string();
  if (!train::checkpoint_exists(ckpt))
    throw Error("[kiln export] expected a training directory written by `kiln train --out " +
                a.dir + "`, but " + ckpt + " does not exist");
  if (is_bundle_dir(a.out) && !a.overwrite)
    throw Error("[kiln export] " + a.out +
                " already holds a saved model; pass --overwrite to replace it, or choose another "
                "--out");
  const RecordedRun run = recorded_run(train::read_checkpoint_metadata(ckpt));
  std::string precision;
  std::optional<DType> compute;
  if (!run.quantization.is_null()) {
    if (!a.precision.empty() && a.precision != "int8")
      throw Error("[kiln export] " + a.dir +
                  " holds an int8 model (kiln quantize): it exports as "
                  "int8 only, not --precision " +
                  a.precision);
    precision = "int8";
  } else {
    const train::Precision p =
        train::parse_precision(a.precision.empty() ? run.precision : a.precision);
    compute = train::precision_compute_dtype(p);
    precision = !compute                      ? "float32"
                : *compute == DType::BFloat16 ? "bf16-autocast"
                                              : "fp16-autocast";
  }
  auto model = load_run_model(ckpt, run, a.weights);
  model->eval();

  const DataInfo& info = run.info;
  std::vector<graph::Dim> dims = {graph::Dim{0, "batch"}};  // as DimSpec("batch")
  for (int64_t d : info.input_shape()) dims.push_back(graph::Dim{d, ""});
  // Traced in eval mode without gradients, under autocast for a 16-bit run.
  const io::ExportedFunction serving = [&] {
    NoGradGuard no_grad;
    std::optional<AutocastGuard> region;
    // Forced: the bundle records the 16-bit casts even where this CPU would keep float32 (it may
    // be served on one with native bfloat16 kernels).
    if (compute) region.emplace(*compute, AutocastOptions{.force = true});
    graph::FunctionOptions fo;
    fo.name = model->type_name();
    fo.capture_name = nn::state_names(*model);
    return io::ExportedFunction{
        .signature = "serving_default",
        .function = nn::function(model, {graph::TensorSpec(dims, DType::Float32, "x")}, fo),
        .output_names = {"logits"}};
  }();
  std::vector<io::ExportedFunction> functions = {serving};
  if (a.with_training) {
    if (precision != "float32")
      throw Error(
          "[kiln export] --with-training exports a float32 training step, but this export "
          "is " +
          precision + " (pass --precision float32)");
    const double smoothing = run.label_smoothing;
    functions.push_back(io::training_function(
        *model,
        [smoothing](const Tensor& logits, const Tensor& target) {
          return cross_entropy(logits, target, Tensor(), -100, Reduction::Mean, smoothing);
        },
        {graph::TensorSpec(dims, DType::Float32, "x")},
        graph::TensorSpec({graph::Dim{0, "batch"}}, DType::Int64, "target")));
  }
  std::string classes;
  for (const std::string& c : info.class_names) classes += c + "\n";
  io::SaveModelOptions options;
  options.precision = precision;
  options.assets = {{"classes.txt", classes}, {"data_info.json", info.to_json().dump(2) + "\n"}};
  options.metadata = {{"model", run.model},
                      {"data", run.data.name},
                      {"label_column", run.data.label_column},
                      {"source", fs::absolute(a.dir).lexically_normal().string()},
                      {"weights", a.weights.empty() ? "last" : a.weights}};
  io::save_model(functions, a.out, options);

  const io::SavedModel bundle = io::load_model(a.out);  // what was written loads
  const io::SignatureDef& sig = bundle.signature("serving_default");
  uint64_t bytes = 0;
  for (const io::FileRecord& f : bundle.info().files) bytes += f.bytes;
  std::cout << fmt::format("Exported {} ({} model, {}) to {}: {:.1f} MB\n", a.dir, run.model,
                           precision, a.out, static_cast<double>(bytes) / 1e6);
  std::cout << fmt::format("  serving_default: {} -> {}\n", sig.inputs[0].describe(),
                           sig.outputs[0].describe());
  if (a.with_training)
    std::cout << fmt::format("  train: x, target -> loss and the gradients of {} parameters\n",
                             bundle.signature("train").gradients.size());
  return 0;
}

int run_inspect(const std::string& dir, const std::string& only) {
  const io::SavedModel bundle = io::load_model(dir);
  if (!only.empty()) bundle.signature(only);  // an unknown name is an error listing the others
  const io::SavedModelInfo& info = bundle.info();
  std::cout << fmt::format("kiln saved model {} (format {}, written by {} at {}, precision {})\n",
                           bundle.dir(), info.format_version, info.producer, info.created,
                           info.precision);
  std::cout << "contains the following SignatureDefs:\n";
  for (const io::SignatureDef& s : bundle.signatures()) {
    if (!only.empty() && s.name != only) continue;
    std::cout << fmt::format("\nsignature_def['{}']:\n", s.name);
    std::cout << "  The given SavedModel SignatureDef contains the following input(s):\n";
    for (const io::TensorInfo& t : s.inputs) print_tensor_info("inputs", t);
    std::cout << "  The given SavedModel SignatureDef contains the following output(s):\n";
    for (const io::TensorInfo& t : s.outputs) print_tensor_info("outputs", t);
    std::cout << fmt::format("  Method name is: {}\n", s.method);
    if (!s.gradients.empty()) {
      std::cout << "  The following output(s) are gradients of the bundle's variables:\n";
      for (const auto& [output, variable] : s.gradients)
        std::cout << fmt::format("    outputs['{}'] = d loss / d {}\n", output, variable);
    }
  }
  std::cout << "\nFiles:\n";
  for (const io::FileRecord& f : info.files)
    std::cout << fmt::format("  {:<28} {:>12} bytes  sha256 {}\n", f.name, f.bytes,
                             f.sha256.empty() ? "(not recorded; CRC-32 checked)" : f.sha256);
  std::cout << "Metadata:\n" << info.metadata.dump(2) << "\n";
  return 0;
}

int run_bundle(const RunArgs& a) {
  const io::SavedModel bundle = io::load_model(a.bundle);
  const io::SignatureDef& sig = bundle.signature(a.signature);
  if (a.inputs.empty()) throw Error("[kiln run] no --input given");
  const auto inputs = read_inputs(a, sig);
  std::vector<std::pair<std::string, Tensor>> outputs;
  {
    NoGradGuard no_grad;
    outputs = bundle.run_named(a.signature, inputs);
  }
  std::error_code ec;
  fs::create_directories(a.out, ec);
  if (ec) throw Error("[kiln run] cannot create --out " + a.out + ": " + ec.message());
  io::NamedArrays arrays;
  for (auto& [name, t] : outputs) {
    // A '/' makes a folder ("gradient/fc1.weight" -> OUT/gradient/fc1.weight.npy), as in .npz.
    const fs::path relative(name);
    bool plain_parts = !name.empty() && name.front() != '/' && name.back() != '/';
    for (const fs::path& part : relative)
      plain_parts &= !part.empty() && part != "." && part != "..";
    if (!plain_parts) throw Error("[kiln run] the output name '" + name + "' cannot name a file");
    Tensor plain = t.dtype() == DType::BFloat16 ? t.to(DType::Float32) : t;
    const fs::path file = fs::path(a.out) / (name + ".npy");
    fs::create_directories(file.parent_path(), ec);
    if (ec)
      throw Error("[kiln run] cannot create " + file.parent_path().string() + ": " + ec.message());
    const std::string path = file.string();
    io::write_npy(path, plain);
    std::cout << fmt::format("{}: {}{}{} -> {}\n", name, dtype_name(t.dtype()),
                             shape_str(t.shape()),
                             t.dtype() == DType::BFloat16 ? " (written as float32)" : "", path);
    arrays.emplace_back(name, std::move(plain));
  }
  const std::string npz = (fs::path(a.out) / "outputs.npz").string();
  io::write_npz(npz, arrays);
  std::cout << "Wrote " << arrays.size() << " output(s) to " << npz << '\n';
  return 0;
}

}  // namespace kiln::cli
