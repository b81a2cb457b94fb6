// REQUIRES: libdevice
// RUN: rm -rf %t && kvattn-compile %s -o %t/huge --chip=sm_90a > /dev/null
// RUN: FileCheck %s --input-file=%t/huge.json
// RUN: sed 's/32769/4097/g' %s > %t/small.mlir
// RUN: kvattn-compile %t/small.mlir -o %t/small --chip=sm_90a > /dev/null
// RUN: FileCheck %s --input-file=%t/small.json --check-prefix=SMALL
//
// Static shapes too large for 32-bit index arithmetic: a GQA decode of 66
// sequences over 32769 keys at hd 128 has key and value tensors of
// 66 x 8 x 32769 x 128 = 2,214,660,096 elements, which a 32-bit kernel could
// not index (the runtime would refuse every launch, naming the option).
// compileToPtx takes 64 bits by itself for such a module, so the manifest
// says 64; the same decode over 4097 keys stays 32-bit.

// CHECK: "index_bits": 64
// SMALL: "index_bits": 32
func.func @main(%q: tensor<66x32x1x128xbf16>, %k: tensor<66x8x32769x128xbf16>,
                %v: tensor<66x8x32769x128xbf16>, %pos: tensor<66xi32>)
    -> tensor<66x32x1x128xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<66xi32>) causal
      : tensor<66x32x1x128xbf16>, tensor<66x8x32769x128xbf16>,
        tensor<66x8x32769x128xbf16> -> tensor<66x32x1x128xbf16>
  return %o : tensor<66x32x1x128xbf16>
}
