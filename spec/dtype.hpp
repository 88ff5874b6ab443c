// Data types, once for the whole program: what a model trains in (Megatron's names), the keys of
// a device's peak-TFLOP/s table, and the element type collectives move (nccl-tests' names for
// those, "float32" and "bfloat16", are read too and are what `bench coll` reports).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace sax {

enum class DType { fp32, tf32, bf16, fp16, fp8 };
constexpr DType kDTypes[] = {DType::fp32, DType::tf32, DType::bf16, DType::fp16, DType::fp8};

const char* to_string(DType d);  // fp32, tf32, bf16, fp16, fp8
// The name of the element type in memory, as nccl-tests and `bench coll` print it (tf32 is stored
// as float32, fp8 as float8).
const char* element_name(DType d);
int dtype_bytes(DType d);
// Either spelling (fp32 or float32/float, bf16 or bfloat16, fp16 or float16/half, ...).
std::optional<DType> parse_dtype(const std::string& name);
const std::vector<std::string>& dtype_names();  // the to_string names, in kDTypes order

}  // namespace sax
