// SAX_CUPTI_CHECK(call): a CUPTI call that does not return CUPTI_SUCCESS throws sax::CuptiError
// with CUPTI's result string.
#pragma once

#include <cupti.h>

#include <string>

#include "spec/error.hpp"

namespace sax::checks {

inline void cupti(CUptiResult rc, const char* call, const char* file, int line) {
  if (rc == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  if (cuptiGetResultString(rc, &text) != CUPTI_SUCCESS || !text) text = "unknown CUPTI error";
  throw CuptiError(call, file, line, text);
}

}  // namespace sax::checks

#define SAX_CUPTI_CHECK(call) ::sax::checks::cupti((call), #call, __FILE__, __LINE__)
