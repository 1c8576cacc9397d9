"""The search space of the planner: which DP×TP×PP×MBS layouts are legal for a model on a cluster.

Legality is arithmetic, not prediction: TP stays within a node and divides the heads, PP divides the
layers, DP·TP·PP uses every GPU, GBS divides into DP·MBS micro-batches, and, where attention
materialises its scores, Megatron's fused softmax kernel needs (MBS·heads/TP) divisible by 4 (Megatron-LM `FusedScaleMaskSoftmax.is_kernel_available`:
`attn_batches % 4 == 0` with attn_batches = b·np). User constraints are small Python expressions over
the layout's names, checked without `eval` and bounded in size (no power operator, small literals).
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from tracelog.errors import TracelogError

MBS_CHOICES = (1, 2, 4, 8, 16)
FUSED_SOFTMAX_MAX_SEQ = 16384  # Megatron-LM scaled_masked_softmax kernel: 16 < sk <= 16384


@dataclass(frozen=True)
class Layout:
    dp: int
    tp: int
    pp: int
    mbs: int
    gbs: int
    gpus: int
    gpus_per_node: int

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_node)

    @property
    def microbatches(self) -> int:
        return self.gbs // (self.dp * self.mbs)

    def names(self, layers: int, heads: int, hidden: int, seq_len: int) -> dict[str, int]:
        return {
            **asdict(self),
            "nodes": self.nodes,
            "m": self.microbatches,
            "layers": layers,
            "heads": heads,
            "hidden": hidden,
            "seq": seq_len,
        }


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def fused_softmax_ok(mbs: int, heads: int, tp: int, seq_len: int) -> bool:
    return (mbs * heads // tp) % 4 == 0 and seq_len % 4 == 0 and 16 < seq_len <= FUSED_SOFTMAX_MAX_SEQ


def layouts(
    gpus: int,
    gpus_per_node: int,
    layers: int,
    heads: int,
    gbs: int,
    seq_len: int,
    require_fused_softmax: bool = True,
    query_groups: int | None = None,
) -> Iterator[tuple[Layout, list[str]]]:
    """Every layout that uses all GPUs, with the rules it breaks (empty when legal). The fused softmax
    rule holds only where attention materialises its scores (`require_fused_softmax`); with grouped-query
    attention TP also divides the key/value groups (Megatron-LM's `num_query_groups % tp` check)."""
    for tp in divisors(gpus_per_node):
        for pp in divisors(gpus // tp) if gpus % tp == 0 else []:
            dp = gpus // (tp * pp)
            for mbs in MBS_CHOICES:
                broken = []
                if heads % tp:
                    broken.append(f"heads {heads} not divisible by TP {tp}")
                if layers % pp:
                    broken.append(f"layers {layers} not divisible by PP {pp}")
                if gbs % (dp * mbs):
                    broken.append(f"GBS {gbs} not divisible by DP·MBS {dp * mbs}")
                if query_groups and query_groups != heads and query_groups % tp:
                    broken.append(f"query groups {query_groups} not divisible by TP {tp}")
                if require_fused_softmax and not heads % tp and not fused_softmax_ok(mbs, heads, tp, seq_len):
                    broken.append(f"fused softmax needs MBS·heads/TP = {mbs * heads // tp} divisible by 4")
                yield Layout(dp, tp, pp, mbs, gbs, gpus, gpus_per_node), broken


# Arithmetic and comparisons only: no power (`9**9**9` is a number of 370 million digits that takes
# hours to build), no shifts, no calls or attributes.
_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_ALLOWED = (
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.UAdd,
    ast.BinOp,
    ast.Compare,
    ast.Name,
    ast.Constant,
    ast.Load,
    *_OPS,
)
MAX_CONSTRAINT_CHARS = 500  # a constraint is a line a person types, not a program
MAX_LITERAL = 10**9  # more than any GPU count, layer count or batch size
MAX_VALUE = 2**63  # intermediate results stay within a 64-bit integer, so each step is cheap


class Constraint:
    """A user constraint such as `dp % 4 == 0 and pp <= 12`, parsed once, checked per layout.

    Evaluated by walking a whitelisted syntax tree (never `eval`): names of the layout, number literals
    up to `MAX_LITERAL`, arithmetic other than power, comparisons and `and`/`or`/`not`; every intermediate
    value is bounded by `MAX_VALUE`, so no constraint can take long or use much memory.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        if len(text) > MAX_CONSTRAINT_CHARS:
            raise TracelogError(f"constraint of {len(text)} characters; at most {MAX_CONSTRAINT_CHARS}")
        try:
            self.tree = ast.parse(text, mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            reason = exc.msg if isinstance(exc, SyntaxError) else "too deeply nested or too long"
            raise TracelogError(f"constraint {text!r} is not an expression: {reason}") from None
        self._check(self.tree)

    def _check(self, node: ast.AST) -> None:
        for child in ast.walk(node):
            if not isinstance(child, _ALLOWED):
                raise TracelogError(f"constraint {self.text!r}: {type(child).__name__} is not allowed")
            if isinstance(child, ast.Constant):
                value = child.value
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise TracelogError(f"constraint {self.text!r}: {value!r} is not a number")
                if not abs(value) <= MAX_LITERAL:  # also refuses nan and inf
                    raise TracelogError(
                        f"constraint {self.text!r}: the number {value!r} is outside ±{MAX_LITERAL:g}"
                    )

    def __call__(self, names: dict[str, int]) -> bool:
        try:
            return bool(self._eval(self.tree, names))
        except ZeroDivisionError as exc:
            raise TracelogError(f"constraint {self.text!r}: {exc}") from None
        except RecursionError:
            raise TracelogError(f"constraint {self.text!r}: too deeply nested") from None

    def _bounded(self, value: object) -> object:
        if isinstance(value, int | float) and not abs(value) <= MAX_VALUE:
            raise TracelogError(f"constraint {self.text!r}: an intermediate value is beyond ±2**63")
        return value

    def _eval(self, node: ast.AST, names: dict[str, int]) -> object:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise TracelogError(
                    f"constraint {self.text!r}: unknown name {node.id!r}; use {', '.join(names)}"
                )
            return names[node.id]
        if isinstance(node, ast.BoolOp):
            values = (self._eval(v, names) for v in node.values)
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.UnaryOp):
            value = self._eval(node.operand, names)
            if isinstance(node.op, ast.Not):
                return not value
            return -value if isinstance(node.op, ast.USub) else +value  # type: ignore[operator]
        if isinstance(node, ast.BinOp):
            left, right = self._eval(node.left, names), self._eval(node.right, names)
            return self._bounded(_OPS[type(node.op)](left, right))
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, names)
            for op, comparator in zip(node.ops, node.comparators, strict=True):
                right = self._eval(comparator, names)
                if not _OPS[type(op)](left, right):
                    return False
                left = right
            return True
        raise TracelogError(f"constraint {self.text!r}: cannot evaluate {type(node).__name__}")
