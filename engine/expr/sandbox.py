"""The sandbox playbook expressions and templates run in: plain data only, and bounded work.

Data model. An expression sees `state`, `config` and `attempt`. Attribute access is allowed on
pydantic models (their fields and properties, never their methods), on plain data (the read-only
methods listed in _PLAIN_METHODS) and on a for-loop's `loop`; on anything else it is undefined. A
model field that holds a path is handed over as a string, so no object whose methods touch files
ever reaches an expression (`config.out_dir.joinpath(...)` is `str.joinpath`: undefined).

Budgets (engine/expr/budget.py): every operation that could allocate without bound is checked before
it runs, and loop iterations and calls count against a wall-time deadline; here they are applied to
jinja's operators, calls and parsed tree. Every refusal is a SandboxLimit, which the callers turn into
an ExpressionError naming the source.
"""

from __future__ import annotations

from enum import Enum
from pathlib import PurePath
from typing import Any

from jinja2 import nodes
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer
from pydantic import BaseModel

from engine.expr.budget import BINOPS, MAX_DEPTH, SandboxLimit, check_weight, guard_call, spend

# Read-only methods of plain data; everything else on these types is undefined.
_STR_METHODS = frozenset(
    "lower upper title capitalize casefold swapcase strip lstrip rstrip startswith endswith split rsplit "
    "splitlines partition rpartition find rfind index rindex count replace join isdigit isalpha isalnum "
    "isspace islower isupper isnumeric isdecimal removeprefix removesuffix".split()
)
_PLAIN_METHODS: dict[type, frozenset[str]] = {
    str: _STR_METHODS,
    dict: frozenset({"keys", "values", "items", "get"}),
    list: frozenset({"index", "count"}),
    tuple: frozenset({"index", "count"}),
    int: frozenset({"real", "imag", "bit_length"}),
    float: frozenset({"real", "imag", "is_integer"}),
    bool: frozenset(),
    type(None): frozenset(),
    LoopContext: frozenset({"index", "index0", "revindex", "revindex0", "first", "last", "length",
                            "depth", "depth0", "previtem", "nextitem"}),
}


class _ModelInfo:
    __slots__ = ("fields", "paths", "properties")

    def __init__(self, cls: type[BaseModel]):
        self.fields = frozenset(cls.model_fields)
        # Fields whose type mentions a path: handed to expressions as strings (see plain_data).
        self.paths = frozenset(n for n, f in cls.model_fields.items() if "Path" in repr(f.annotation))
        self.properties = frozenset(
            name for klass in cls.__mro__ for name, value in vars(klass).items()
            if isinstance(value, property) and not name.startswith("_") and klass.__module__.split(".")[0] in ("engine", "runbook")
        )


_MODELS: dict[type, _ModelInfo] = {}


def model_info(cls: type) -> _ModelInfo | None:
    info = _MODELS.get(cls)
    if info is None and issubclass(cls, BaseModel):
        info = _MODELS[cls] = _ModelInfo(cls)
    return info


def plain_data(value: Any) -> Any:
    """Paths -> strings, inside lists, tuples and dicts too."""
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [plain_data(v) for v in value]
    if isinstance(value, dict):
        return {k: plain_data(v) for k, v in value.items()}
    return value


def allowed_attribute(obj: Any, attr: str) -> bool:
    if not isinstance(attr, str) or attr.startswith("_"):
        return False
    info = model_info(type(obj))
    if info is not None:
        return attr in info.fields or attr in info.properties
    if isinstance(obj, Enum) and attr in ("name", "value"):
        return True
    for kind in type(obj).__mro__:  # str enums and Markup are str; bool is int
        methods = _PLAIN_METHODS.get(kind)
        if methods is not None:
            return attr in methods
    return False


class Sandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox restricted to plain data, with operator and loop budgets."""

    intercepted_binops = frozenset(BINOPS)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        return allowed_attribute(obj, attr) and super().is_safe_attribute(obj, attr, value)

    def getattr(self, obj: Any, attribute: Any) -> Any:
        # Fast path: conditions read model fields at every observation (`state.metrics.loss`).
        info = _MODELS.get(type(obj)) or (model_info(type(obj)) if isinstance(obj, BaseModel) else None)
        if info is not None and attribute in info.fields:
            value = obj.__dict__[attribute]
            return plain_data(value) if attribute in info.paths else value
        if not isinstance(obj, dict) and not allowed_attribute(obj, attribute):
            if info is not None and not hasattr(type(obj), str(attribute)):
                return self.undefined(obj=obj, name=attribute)  # a typo of a field: jinja's own undefined
            return self.unsafe_undefined(obj, attribute)  # refused without touching it
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        if isinstance(obj, BaseModel):
            return self.getattr(obj, argument)
        value = super().getitem(obj, argument)
        return str(value) if isinstance(value, PurePath) else value

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        return BINOPS[operator](left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - jinja's signature
        spend()
        guard_call(__obj, args)
        return check_weight(super().call(__context, __obj, *args, **kwargs))


# Template constructs that would make work unbounded (recursion) or reach other files.
_REFUSED_NODES = (nodes.Macro, nodes.CallBlock, nodes.Import, nodes.FromImport, nodes.Include, nodes.Extends, nodes.Block)


class _Bounded(NodeTransformer):
    """Loops iterate through budget_iter; `~` joins through safe_concat (sizes checked)."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        if node.recursive:
            raise SandboxLimit("recursive loops are not allowed")
        node.iter = nodes.Call(nodes.Name("__budget_iter", "load"), [node.iter], [], None, None, lineno=node.lineno)
        return node

    def visit_List(self, node: nodes.Node) -> nodes.Node:
        """`[a, a]`, `(a, a)`, `{'x': a, 'y': a}`: weighed when built (see weight())."""
        self.generic_visit(node)
        if getattr(node, "ctx", "load") != "load":   # `{% for a, b in ... %}` assigns to a tuple
            return node
        return nodes.Call(nodes.Name("__weighed", "load"), [node], [], None, None, lineno=node.lineno)

    visit_Tuple = visit_Dict = visit_List

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Call(nodes.Name("__concat", "load"), list(node.nodes), [], None, None, lineno=node.lineno)


def check_tree(tree: nodes.Node) -> str | None:
    """Why a parsed expression/template is refused, or None: private names, refused nodes, depth."""
    everything = [tree, *tree.find_all(nodes.Node)]  # find_all skips the root itself
    for node in (n for n in everything if isinstance(n, (nodes.Getattr, nodes.Getitem, nodes.Name))):
        attr = node.attr if isinstance(node, nodes.Getattr) else node.name if isinstance(node, nodes.Name) else getattr(node.arg, "value", None)
        if isinstance(attr, str) and attr.startswith("_"):
            return f"access to '{attr}' is not allowed in the sandbox"
    for refused in (n for n in everything if isinstance(n, _REFUSED_NODES)):
        return f"'{type(refused).__name__.lower()}' is not allowed in a playbook template"
    stack: list[tuple[nodes.Node, int]] = [(tree, 0)]
    while stack:  # iterative: a deep tree must not exhaust the Python stack here
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"nested more than {MAX_DEPTH} levels deep"
        stack.extend((child, depth + 1) for child in item.iter_child_nodes())
    return None


def bound(tree: nodes.Template) -> nodes.Template:
    return _Bounded().visit(tree)   # the root itself is never replaced: only loops and literals in it
