func.func @concat_dynamic(%q: tensor<?x4x?x8xf16>, %kc: tensor<?x2x?x8xf16>,
    %kn: tensor<?x2x?x8xf16>, %v: tensor<?x2x?x8xf16>) -> tensor<?x4x?x8xf16> {
  %k = tensor.concat dim(2) %kc, %kn : (tensor<?x2x?x8xf16>, tensor<?x2x?x8xf16>) -> tensor<?x2x?x8xf16>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<?x4x?x8xf16>, tensor<?x2x?x8xf16>, tensor<?x2x?x8xf16> -> tensor<?x4x?x8xf16>
  return %o : tensor<?x4x?x8xf16>
}
