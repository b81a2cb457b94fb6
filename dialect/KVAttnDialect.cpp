//===- KVAttnDialect.cpp - kvattn dialect ---------------------------------===//

#include "kvattn/Dialect/KVAttnDialect.h"
#include "kvattn/Dialect/KVAttnOps.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::kvattn;

#include "kvattn/Dialect/KVAttnDialect.cpp.inc"

void KVAttnDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "kvattn/Dialect/KVAttnOps.cpp.inc"
      >();
  registerAttributes();
}
