//===- OrderConstantGlobals.cpp - one order for bufferized constants ------===//
//
// One-shot bufferization names and orders the memref.global constants it
// creates in an order that may differ between runs when a module has several
// functions; this pass sorts them by type and value and renames them, so
// that the CPU pipeline's output is the same text on every run.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Passes/Passes.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_ORDERCONSTANTGLOBALSPASS
#include "kvattn/Passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;

namespace {

/// A private constant global, with the text that orders it.
struct ConstantGlobal {
  memref::GlobalOp op;
  std::string key;
};

std::string orderKey(memref::GlobalOp global) {
  std::string key;
  llvm::raw_string_ostream os(key);
  os << global.getType() << " ";
  if (std::optional<Attribute> value = global.getInitialValue())
    os << *value;
  os << " " << global.getAlignment().value_or(0);
  return key;
}

struct OrderConstantGlobalsPass
    : mlir::kvattn::impl::OrderConstantGlobalsPassBase<
          OrderConstantGlobalsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<ConstantGlobal> globals;
    for (auto global : module.getOps<memref::GlobalOp>())
      if (global.getConstant() && global.isPrivate() &&
          global.getSymName().starts_with("__constant_"))
        globals.push_back({global, orderKey(global)});
    if (globals.empty())
      return;
    llvm::stable_sort(globals,
                      [](const ConstantGlobal &a, const ConstantGlobal &b) {
                        return a.key < b.key;
                      });
    // Fresh names first (no clash with the old ones while renaming), then
    // the final ones, in the sorted order.
    auto rename = [&](memref::GlobalOp global, StringAttr name) {
      if (failed(SymbolTable::replaceAllSymbolUses(global.getSymNameAttr(),
                                                   name, module)))
        return failure();
      global.setSymName(name.getValue());
      return success();
    };
    MLIRContext *ctx = &getContext();
    for (auto [k, g] : llvm::enumerate(globals))
      if (failed(rename(g.op, StringAttr::get(ctx, "__kvattn_ordering_" +
                                                       std::to_string(k)))))
        return signalPassFailure();
    for (auto [k, g] : llvm::enumerate(globals)) {
      std::string type;
      llvm::raw_string_ostream os(type);
      for (int64_t extent : g.op.getType().getShape())
        os << extent << "x";
      os << g.op.getType().getElementType();
      if (failed(rename(g.op, StringAttr::get(ctx, "__constant_" + type + "_" +
                                                       std::to_string(k)))))
        return signalPassFailure();
    }
    // First in the module, in the sorted order.
    Block *body = module.getBody();
    for (ConstantGlobal &g : llvm::reverse(globals))
      g.op->moveBefore(body, body->begin());
  }
};

} // namespace
