"""kvattn.torch.lint / fix on a PyTorch model written like the one that had
the bug (buggy_model.py): a cached append of 3 tokens onto 5 with SDPA
is_causal=True. Before the fix the appended rows differ from a full forward
over the 8 tokens by more than 0.1; after it they match to 1e-5 (f32); the
correct model (a lower-right mask) gives no finding."""

import inspect

import pytest
import torch

import kvattn
import kvattn.torch as kt

from buggy_model import CachedAttention, CorrectModel


def make_case(model_class):
    torch.manual_seed(0)
    model = model_class().eval()
    x = torch.randn(2, 8, 32)
    empty = torch.zeros(2, 2, 0, 8)
    full, _, _ = model(x, empty, empty)  # prefill over all 8 tokens
    _, pk, pv = model(x[:, :5], empty, empty)  # the cache of 5 tokens
    return model, x, full, pk, pv


def test_lint_reports_the_line():
    model, x, full, pk, pv = make_case(CachedAttention)
    findings = kt.lint(model, x[:, 5:], pk, pv)
    assert len(findings) == 1
    f = findings[0]
    source, start = inspect.getsourcelines(CachedAttention.forward)
    line = start + next(i for i, s in enumerate(source)
                        if "scaled_dot_product_attention" in s)
    assert f.file.endswith("buggy_model.py") and f.line == line
    assert f.code.startswith("out = F.scaled_dot_product_attention(")
    assert (f.query_len, f.key_len) == (3, 8)
    assert "torch.cat onto cached keys" in f.reason
    assert str(f).startswith(f"{f.file}:{line}: warning: "
                             "scaled_dot_product_attention(is_causal=True) "
                             "over a KV cache")


def test_fix_makes_the_appended_rows_right():
    model, x, full, pk, pv = make_case(CachedAttention)
    with torch.no_grad():
        buggy, _, _ = model(x[:, 5:], pk, pv)
        assert (buggy - full[:, 5:]).abs().max() > 0.1
        fixed_model = kt.fix(model, x[:, 5:], pk, pv)
        assert len(fixed_model.findings) == 1
        fixed, k, _ = fixed_model(x[:, 5:], pk, pv)
    assert (fixed - full[:, 5:]).abs().max() < 1e-5
    assert k.shape == (2, 2, 8, 8)
    targets = [n.target for n in fixed_model.graph.nodes]
    assert torch.ops.kvattn.attention.default in targets
    assert torch.ops.aten.scaled_dot_product_attention.default not in targets
    # The fixed module has no finding left.
    assert kt.lint(fixed_model, x[:, 5:], pk, pv) == []


def test_correct_model_and_prefill_have_no_finding():
    model, x, full, pk, pv = make_case(CorrectModel)
    assert kt.lint(model, x[:, 5:], pk, pv) == []
    with torch.no_grad():
        appended, _, _ = model(x[:, 5:], pk, pv)
    assert (appended - full[:, 5:]).abs().max() < 1e-5
    # The buggy model's prefill (an empty past) is no append either.
    buggy, x, _, _, _ = make_case(CachedAttention)
    empty = torch.zeros(2, 2, 0, 8)
    assert kt.lint(buggy, x, empty, empty) == []


def test_lint_misuse():
    with pytest.raises(kvattn.KVAttnTypeError, match="must be a torch.nn"):
        kt.lint(lambda x: x, torch.zeros(1))
    model, x, _, pk, pv = make_case(CachedAttention)
    with pytest.raises(kvattn.KVAttnValueError, match="torch.export could "
                       "not trace CachedAttention"):
        kt.lint(model, x[:, 5:])  # an argument missing
