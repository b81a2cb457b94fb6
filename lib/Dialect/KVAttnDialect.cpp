//===- KVAttnDialect.cpp - kvattn dialect ---------------------------------===//

#include "kvattn/Dialect/KVAttnDialect.h"
#include "kvattn/Dialect/KVAttnOps.h"

using namespace mlir;
using namespace mlir::kvattn;

#include "kvattn/Dialect/KVAttnDialect.cpp.inc"

void KVAttnDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "kvattn/Dialect/KVAttnOps.cpp.inc"
      >();
}
