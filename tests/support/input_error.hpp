// Test helper: the InputError an expression throws (its path and message), or a test failure
// when it throws none.
#pragma once

#include <gtest/gtest.h>

#include "spec/error.hpp"

namespace sax::test {

template <class Fn>
InputError input_error(Fn&& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e;
  }
  ADD_FAILURE() << "no InputError";
  return InputError("", "", "");
}

}  // namespace sax::test
