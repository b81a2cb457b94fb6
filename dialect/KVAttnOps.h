//===- KVAttnOps.h - kvattn operations --------------------------*- C++ -*-===//

#ifndef KVATTN_DIALECT_KVATTNOPS_H
#define KVATTN_DIALECT_KVATTNOPS_H

#include "dialect/KVAttnDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialect/KVAttnEnums.h.inc"

#define GET_OP_CLASSES
#include "dialect/KVAttnOps.h.inc"

#endif // KVATTN_DIALECT_KVATTNOPS_H
