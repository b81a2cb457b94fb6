// REQUIRES: libdevice
// kvattn-run --target=gpu without a GPU: with no driver it says so and
// exits 1; with the fake driver of the runtime tests (host memory, kernels
// not executed) the whole path runs: the two cache writes and the
// attention are compiled to PTX, the modules loaded, inputs copied in, the
// kernels launched from their manifests, the output copied back (zeros: the
// fake driver runs no code), so --check fails -- as it must when a kernel
// computes nothing.
//
// DEFINE: %{args} = --input 0=0 --input 1=0 --input 2=10,20,30,0,0 --input 3=0 --input 4=40,50 --input 5=3
// RUN: env KVATTN_LIBCUDA=%t.no-such-driver.so not kvattn-run %s --target=gpu %{args} 2>&1 | FileCheck %s --check-prefix=NODRIVER
// RUN: env KVATTN_LIBCUDA=%fakecuda kvattn-run %s --target=gpu --print-outputs %{args} | FileCheck %s --check-prefix=FAKE
// RUN: env KVATTN_LIBCUDA=%fakecuda not kvattn-run %s --target=gpu --check %{args} | FileCheck %s --check-prefix=CHECK-FAIL

// NODRIVER: kvattn-run: error: --target=gpu: no CUDA driver: cannot load '{{.*}}no-such-driver.so'
// FAKE: out0: 1x1x2x1xf32 = [0, 0]
// CHECK-FAIL: check out0: {{.*}} FAIL (2 mismatches, first at 0: got 0.000000e+00, want 2.500000e+01)
// CHECK-FAIL: {{^FAIL$}}

func.func @lower_right(%q: tensor<1x1x2x1xf32>, %kc: tensor<1x1x5x1xf32>, %vc: tensor<1x1x5x1xf32>,
                       %kn: tensor<1x1x2x1xf32>, %vn: tensor<1x1x2x1xf32>, %pos: tensor<1xi32>)
    -> tensor<1x1x2x1xf32> {
  %k = kvattn.append %kn into %kc at %pos : tensor<1x1x2x1xf32> into tensor<1x1x5x1xf32>, tensor<1xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<1x1x2x1xf32> into tensor<1x1x5x1xf32>, tensor<1xi32>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<1x1x2x1xf32>, tensor<1x1x5x1xf32>, tensor<1x1x5x1xf32> -> tensor<1x1x2x1xf32>
  return %o : tensor<1x1x2x1xf32>
}
