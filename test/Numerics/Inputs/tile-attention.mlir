// Transform scripts of test/Numerics/tiled-attention.mlir: each tiles the
// kvattn.attention ops of the payload with upstream tile_using_forall.
module attributes {transform.with_named_sequence} {
  // One batch, one GQA group of 4 query heads, 4 rows per tile.
  transform.named_sequence @tile_groups(%root: !transform.any_op {transform.readonly}) {
    %op = transform.structured.match ops{["kvattn.attention"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_forall %op tile_sizes [1, 4, 4]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
  // Two query heads (inside a group of 4) and 3 rows per tile: the last
  // row tile is partial.
  transform.named_sequence @tile_inside_group(%root: !transform.any_op {transform.readonly}) {
    %op = transform.structured.match ops{["kvattn.attention"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_forall %op tile_sizes [0, 2, 3]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
  // One sequence per tile.
  transform.named_sequence @tile_batch(%root: !transform.any_op {transform.readonly}) {
    %op = transform.structured.match ops{["kvattn.attention"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_forall %op tile_sizes [1]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}
