#include "spec/dtype.hpp"

namespace sax {

namespace {

struct Entry {
  DType dtype;
  const char* name;
  const char* element;
  int bytes;
};
constexpr Entry kDTypeEntries[] = {{DType::fp32, "fp32", "float32", 4},
                                   {DType::tf32, "tf32", "float32", 4},
                                   {DType::bf16, "bf16", "bfloat16", 2},
                                   {DType::fp16, "fp16", "float16", 2},
                                   {DType::fp8, "fp8", "float8", 1}};

const Entry& entry(DType d) { return kDTypeEntries[static_cast<int>(d)]; }

}  // namespace

const char* to_string(DType d) { return entry(d).name; }
const char* element_name(DType d) { return entry(d).element; }
int dtype_bytes(DType d) { return entry(d).bytes; }

std::optional<DType> parse_dtype(const std::string& name) {
  for (const Entry& e : kDTypeEntries)
    if (name == e.name) return e.dtype;
  if (name == "float32" || name == "float") return DType::fp32;
  if (name == "bfloat16") return DType::bf16;
  if (name == "float16" || name == "half") return DType::fp16;
  return std::nullopt;
}

const std::vector<std::string>& dtype_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Entry& e : kDTypeEntries) v.emplace_back(e.name);
    return v;
  }();
  return names;
}

}  // namespace sax
