"""The upper-left append lint on PyTorch models (docs/torch.md, "The lint").

`lint(model, *example_inputs)` traces the model with torch.export and finds
every `scaled_dot_product_attention` call with `is_causal=True` whose keys
include a cache: more keys than queries (the causal triangle of
`is_causal=True` starts at key 0, so query row i sees keys 0..i and the
appended rows miss the cached context), or keys written into a cache
upstream (`torch.cat` onto past keys, `index_copy`, `slice_scatter`,
`index_put`, `copy_`). Each finding names the model's source file and line.

`fix(model, *example_inputs)` returns the traced module with those calls
replaced by `kvattn::attention` with positions: the queries are the last L
of the S keys (q_offset = S - L, lower-right), which is what a cached append
means.
"""

import re
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch

from ..capi import KVAttnTypeError, KVAttnValueError

_SDPA = torch.ops.aten.scaled_dot_product_attention.default
# Ops through which a key tensor keeps its rows: followed upstream.
_PASS_THROUGH = {"view", "_unsafe_view", "reshape", "transpose", "permute",
                 "contiguous", "clone", "expand", "repeat_interleave",
                 "unsqueeze", "squeeze", "flatten", "alias", "to",
                 "_to_copy", "detach", "slice", "narrow", "getitem",
                 "repeat"}
# Ops that write new rows into (or after) a cache.
_CACHE_WRITES = {"cat": "torch.cat onto cached keys",
                 "index_copy": "index_copy into a cache",
                 "index_copy_": "index_copy_ into a cache",
                 "slice_scatter": "a slice write into a cache",
                 "index_put": "index_put into a cache",
                 "index_put_": "index_put_ into a cache",
                 "copy_": "copy_ into a cache",
                 "copy": "a copy into a cache",
                 "scatter": "scatter into a cache"}


class Finding(NamedTuple):
    """One upper-left causal SDPA over a cache."""
    file: str            # the model's source file ("" when unknown)
    line: int            # its line (0 when unknown)
    code: str            # the source line
    node: str            # the call's node in the traced graph
    query_len: int
    key_len: int
    reason: str          # why its keys include a cache
    message: str

    def __str__(self):
        return f"{self.file}:{self.line}: warning: {self.message}"


def _op_name(node) -> str:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name.split("::")[-1]
    return getattr(target, "__name__", str(target))


def _sdpa_args(node) -> Dict[str, Any]:
    """The call's arguments by name (aten's schema)."""
    names = [a.name for a in _SDPA._schema.arguments]
    args = dict(zip(names, node.args))
    args.update(node.kwargs)
    for a in _SDPA._schema.arguments:
        if a.name not in args and a.has_default_value():
            args[a.name] = a.default_value
    return args


def _cache_write(node, depth=0) -> Optional[str]:
    """How `node` (a key) got a cache write upstream, if it did: the write
    op's description, with the length of what was already there when the
    trace knows it."""
    if depth > 32 or not isinstance(node, torch.fx.Node) or \
            node.op != "call_function":
        return None
    name = _op_name(node)
    if name in _CACHE_WRITES:
        if name == "cat":
            tensors, dim = node.args[0], (node.args[1] if len(node.args) > 1
                                          else node.kwargs.get("dim", 0))
            first = tensors[0] if tensors else None
            val = getattr(first, "meta", {}).get("val")
            if val is not None and val.dim() and \
                    isinstance(val.shape[dim], int) and val.shape[dim] == 0:
                return None  # an empty past: a prefill
        return _CACHE_WRITES[name]
    if name in _PASS_THROUGH and node.args:
        return _cache_write(node.args[0], depth + 1)
    return None


def _source(node) -> Tuple[str, int, str]:
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in [^\n]*\n\s*([^\n]*)',
                        trace)
    if not frames:
        return "", 0, ""
    file, line, code = frames[-1]
    return file, int(line), code.strip()


def _export(model, example_inputs, example_kwargs):
    if not isinstance(model, torch.nn.Module):
        raise KVAttnTypeError(f"model must be a torch.nn.Module, got "
                              f"{type(model).__name__}")
    try:
        return torch.export.export(model, tuple(example_inputs),
                                   kwargs=example_kwargs or None)
    except Exception as e:  # noqa: BLE001 (torch's many export errors)
        raise KVAttnValueError(
            f"torch.export could not trace {type(model).__name__} "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
            "; the lint reads the exported graph") from None


def _findings(graph) -> List[Tuple[torch.fx.Node, Finding]]:
    out = []
    for node in graph.nodes:
        if node.op != "call_function" or node.target != _SDPA:
            continue
        args = _sdpa_args(node)
        if not args.get("is_causal"):
            continue
        q = args["query"].meta.get("val")
        k = args["key"].meta.get("val")
        if q is None or k is None:
            continue
        L, S = q.shape[-2], k.shape[-2]
        write = _cache_write(args["key"])
        longer = isinstance(L, int) and isinstance(S, int) and S > L
        if not longer and write is None:
            continue
        reason = (f"{S} keys for {L} queries" if longer else "") + \
            (", " if longer and write else "") + (write or "")
        file, line, code = _source(node)
        message = (
            f"scaled_dot_product_attention(is_causal=True) over a KV cache "
            f"({reason}): is_causal aligns the causal triangle to the first "
            f"key (upper-left), so query row i sees only keys 0..i and the "
            f"appended rows miss the cached context. If the queries are the "
            f"last {L} tokens, use positions: kvattn.torch.fix(model, ...) "
            f"or kvattn.torch.attention (q_offset = kv_len - L)")
        out.append((node, Finding(file, line, code, node.name,
                                  int(L) if isinstance(L, int) else -1,
                                  int(S) if isinstance(S, int) else -1,
                                  reason, message)))
    return out


def lint(model: torch.nn.Module, *example_inputs,
         **example_kwargs) -> List[Finding]:
    """The upper-left causal SDPA calls over a KV cache in `model`, traced
    with torch.export on the example inputs; [] for a correct model."""
    ep = _export(model, example_inputs, example_kwargs)
    return [f for _, f in _findings(ep.graph)]


def fix(model: torch.nn.Module, *example_inputs,
        **example_kwargs) -> torch.nn.Module:
    """The traced module (torch.export's, for the example inputs' shapes)
    with every call lint() reports replaced by kvattn::attention with
    lower-right positions (q_offset = S - L); the module's other calls
    unchanged. `fix(...).findings` lists what was replaced."""
    ep = _export(model, example_inputs, example_kwargs)
    flagged = {node.name: f for node, f in _findings(ep.graph)}
    gm = ep.module()
    import kvattn.torch  # noqa: F401 (registers torch.ops.kvattn)
    for node in list(gm.graph.nodes):
        if node.name not in flagged or node.target != _SDPA:
            continue
        args = _sdpa_args(node)
        if args.get("attn_mask") is not None or args.get("dropout_p"):
            raise KVAttnValueError(
                f"{flagged[node.name].file}:{flagged[node.name].line}: "
                "cannot fix an SDPA with attn_mask or dropout_p")
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(
                torch.ops.kvattn.attention.default,
                (args["query"], args["key"], args["value"], None, None, None, True,
                 0, 0.0, args.get("scale"), "bhsd"))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()
    gm.findings = list(flagged.values())
    return gm
