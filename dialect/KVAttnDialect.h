//===- KVAttnDialect.h - kvattn dialect -------------------------*- C++ -*-===//

#ifndef KVATTN_DIALECT_KVATTNDIALECT_H
#define KVATTN_DIALECT_KVATTNDIALECT_H

#include "mlir/IR/Dialect.h"

#include "kvattn/Dialect/KVAttnDialect.h.inc"

#endif // KVATTN_DIALECT_KVATTNDIALECT_H
