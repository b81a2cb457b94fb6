//===- KVAttnOps.h - kvattn operations --------------------------*- C++ -*-===//

#ifndef KVATTN_DIALECT_KVATTNOPS_H
#define KVATTN_DIALECT_KVATTNOPS_H

#include "kvattn/Dialect/KVAttnDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "kvattn/Dialect/KVAttnEnums.h.inc"

#define GET_OP_CLASSES
#include "kvattn/Dialect/KVAttnOps.h.inc"

#endif // KVATTN_DIALECT_KVATTNOPS_H
