// The kiln side of the differential fuzzer (tests/fuzz/fuzz.py drives it).
//
//   kiln_fuzz_worker catalog         prints the catalog of fuzzable registry samples as JSON
//   kiln_fuzz_worker serve           reads one request per line on stdin, answers one line each:
//                                    {"program": {...}, "threads": [1, 2]} -> the result of
//                                    running it at the first thread count, plus "thread_diff":
//                                    what was not bit-identical at the other counts
//   kiln_fuzz_worker run PROGRAM.json [THREADS]   runs one program (a saved repro), prints the
//   result
//
// A request the worker cannot read is answered {"harness_error": "..."}; the worker stays up.
#include <exception>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "kiln/core/parallel.h"
#include "tests/fuzz/program.h"

namespace kiln::fuzz {
namespace {

using nlohmann::json;

// What differs between two results of the same program (values, gradients, errors), bit for bit.
json differences(const json& a, const json& b) {
  json diff = json::array();
  if (a.value("error", json()) != b.value("error", json())) diff.push_back("error");
  const json none = json::array();
  const json& va = a.contains("values") ? a["values"] : none;
  const json& vb = b.contains("values") ? b["values"] : none;
  for (size_t i = 0; i < std::max(va.size(), vb.size()); ++i)
    if (i >= va.size() || i >= vb.size() || va[i] != vb[i])
      diff.push_back("value " + std::to_string(i));
  const json empty = json::object();
  const json& ga = a.contains("grads") ? a["grads"] : empty;
  const json& gb = b.contains("grads") ? b["grads"] : empty;
  for (const auto& [k, g] : ga.items())
    if (!gb.contains(k) || gb[k] != g) diff.push_back("grad " + k);
  return diff;
}

json answer(const Catalog& catalog, const json& request) {
  std::vector<int> threads = request.value("threads", std::vector<int>{1});
  if (threads.empty()) threads = {1};
  json first;
  json thread_diff = json::object();
  for (size_t i = 0; i < threads.size(); ++i) {
    set_num_threads(threads[i]);
    json r = run_program(catalog, request.at("program"));
    if (i == 0) {
      first = std::move(r);
      continue;
    }
    json d = differences(first, r);
    if (!d.empty()) thread_diff[std::to_string(threads[i])] = std::move(d);
  }
  first["threads"] = threads;
  first["thread_diff"] = std::move(thread_diff);
  return first;
}

int serve(const Catalog& catalog) {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    json reply;
    try {
      reply = answer(catalog, json::parse(line));
    } catch (const std::exception& e) {
      reply = json{{"harness_error", e.what()}};
    }
    std::cout << reply.dump() << std::endl;
  }
  return 0;
}

int main_impl(int argc, char** argv) {
  const std::string cmd = argc >= 2 ? argv[1] : "";
  if (cmd == "catalog" && argc == 2) {
    std::cout << Catalog().describe().dump() << "\n";
    return 0;
  }
  if (cmd == "serve" && argc == 2) return serve(Catalog());
  if (cmd == "run" && (argc == 3 || argc == 4)) {
    std::ifstream in(argv[2]);
    if (!in) {
      std::cerr << "kiln_fuzz_worker: cannot read " << argv[2] << "\n";
      return 1;
    }
    json program = json::parse(in);
    std::vector<int> threads{1};
    if (argc == 4) threads = {std::stoi(argv[3])};
    std::cout << answer(Catalog(), json{{"program", program}, {"threads", threads}}).dump(1)
              << "\n";
    return 0;
  }
  std::cerr << "usage: kiln_fuzz_worker catalog | serve | run PROGRAM.json [THREADS]\n";
  return 2;
}

}  // namespace
}  // namespace kiln::fuzz

int main(int argc, char** argv) {
  try {
    return kiln::fuzz::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "kiln_fuzz_worker: " << e.what() << "\n";
    return 1;
  }
}
