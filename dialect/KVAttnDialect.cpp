//===- KVAttnDialect.cpp - kvattn dialect ---------------------------------===//

#include "dialect/KVAttnDialect.h"
#include "dialect/KVAttnOps.h"

using namespace mlir;
using namespace mlir::kvattn;

#include "dialect/KVAttnDialect.cpp.inc"

void KVAttnDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialect/KVAttnOps.cpp.inc"
      >();
}
