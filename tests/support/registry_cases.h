#pragma once
// Every registered op sample as a test parameter (the registry-walk tests).
#include <gtest/gtest.h>

#include <cctype>
#include <ostream>
#include <string>
#include <vector>

#include "tests/samples/registry.h"

namespace kiln::test {

struct RegistryCase {
  std::string op;
  OpSample sample;
};

inline std::vector<RegistryCase> registry_cases() {
  std::vector<RegistryCase> cases;
  for (const OpInfo& info : registered_ops())
    for (OpSample& s : info.samples()) cases.push_back({info.name, std::move(s)});
  return cases;
}

inline void PrintTo(const RegistryCase& c, std::ostream* os) {
  *os << c.op << "/" << c.sample.label;
}

inline std::string registry_case_name(const ::testing::TestParamInfo<RegistryCase>& info) {
  std::string name = info.param.op + "_" + info.param.sample.label;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name + "_" + std::to_string(info.index);
}

}  // namespace kiln::test
