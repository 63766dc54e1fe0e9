"""What a flash-attn sdist's CUDA extension compiles, read statically (helper of flash_attn_source).

Three readers, none of which runs upstream code:

- `SetupReader` walks a setup.py's AST down to one `CUDAExtension(...)` call and evaluates its
  `sources` the way Python would on the CUDA path of a default build: literal lists as written;
  names, `+`, f-strings, comprehensions, `itertools.product`, `os.path.join`, `Path / ...`, and
  `glob.glob` expanded against the sdist's member list. `os.getenv`/`os.environ.get` read their
  default (recorded in `assumed_env`), `IS_ROCM`/`IS_HIP_EXTENSION` read false, a `try` runs its
  body. Anything else (a call of setup.py's own functions, a test the reading cannot decide) makes
  the value unknown, and the extract says `"sources": null` with the reason.
- `kernel_name` splits a kernel file name `flash_{fwd,fwd_split,bwd}_hdim{D}_{dtype}[_causal]_{sm..}.cu`.
- `specializations` finds, in a .cu text without its comments, the template specializations
  (`template<> void f<...>(...) {`) and explicit instantiations (`template void f<...>(...);`) it
  defines, each with its function name, template arguments and parameter list as written.
"""
from __future__ import annotations

import ast
import hashlib
import itertools
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

EXTENSION_NAMES = ("flash_attn_2_cuda", "flash_attn_cuda")
PINNED_FALSE = ("IS_ROCM", "IS_HIP_EXTENSION")  # the CUDA path of setup.py
MAX_ITEMS = 100_000


def git_blob(data: bytes) -> str:
    """The git blob sha of a file's bytes (what `git hash-object` prints): ties an sdist member to the repo."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


# ---------------------------------------------------------------- kernel file names

DTYPES = {"fp16": "fp16", "bf16": "bf16", "e4m3": "fp8", "fp8": "fp8"}
KERNEL_NAME = re.compile(
    r"flash_(?P<kind>fwd_split|fwd|bwd)_hdim(?P<hdim>\d+)_(?P<dtype>fp16|bf16|e4m3|fp8)(?P<causal>_causal)?_(?P<arch>sm\d+[a-z]?)\.cu")


def kernel_name(path: str) -> Optional[dict[str, Any]]:
    """kind, hdim, dtype, causal (None: the name has no causal part), arch of a kernel file name."""
    m = KERNEL_NAME.fullmatch(posixpath.basename(path))
    if not m:
        return None
    return {"kind": m.group("kind"), "hdim": int(m.group("hdim")), "dtype": DTYPES[m.group("dtype")],
            "causal": True if m.group("causal") else None, "arch": m.group("arch")}


# ---------------------------------------------------------------- .cu texts

def strip_comments(text: str) -> str:
    """The text with // and /* */ comments blanked (newlines kept, so line numbers hold); string and
    character literals are left as they are."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _match(text: str, i: int, open_: str, close: str) -> int:
    """Index just past the bracket closing the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j + 1
    return -1


def split_top(args: str) -> list[str]:
    """Template arguments split at top-level commas, each stripped."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in args:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


_TEMPLATE = re.compile(r"\btemplate\b\s*(?P<empty><\s*>)?\s*(?P<ret>(?:[A-Za-z_][\w:]*\s*[*&]?\s+)+?)(?P<fn>[A-Za-z_][\w:]*)\s*<")
_NAMESPACE = re.compile(r"\bnamespace\s+(?P<name>[A-Za-z_][\w:]*)?\s*\{|[{}]")


def _namespaces_at(code: str, pos: int) -> list[str]:
    stack: list[Optional[str]] = []
    for m in _NAMESPACE.finditer(code, 0, pos):
        tok = m.group(0)
        if tok == "}":
            if stack:
                stack.pop()
        elif tok == "{":
            stack.append(None)
        else:
            stack.append(m.group("name") or "")
    return [s for s in stack if s is not None]


def specializations(text: str) -> list[dict[str, Any]]:
    """Explicit specializations and instantiations a .cu file defines (comments ignored)."""
    code = strip_comments(text)
    out = []
    for m in _TEMPLATE.finditer(code):
        lt = m.end() - 1
        gt = _match(code, lt, "<", ">")
        if gt < 0:
            continue
        rest = code[gt:]
        paren = len(rest) - len(rest.lstrip())
        if not rest[paren:].startswith("("):
            continue
        p0 = gt + paren
        p1 = _match(code, p0, "(", ")")
        if p1 < 0:
            continue
        tail = code[p1:].lstrip()
        if m.group("empty"):
            if not tail.startswith("{"):
                continue  # a declaration of a specialization, not its definition
            form = "specialization"
        else:
            if not tail.startswith(";"):
                continue
            form = "instantiation"
        ns = _namespaces_at(code, m.start())
        out.append({
            "form": form,
            "returns": " ".join(m.group("ret").split()),
            "function": m.group("fn"),
            "template_args": split_top(code[lt + 1: gt - 1]),
            "params": " ".join(code[p0 + 1: p1 - 1].split()),
            "namespace": "::".join(ns) if ns else None,
            "line": code.count("\n", 0, m.start()) + 1,
        })
    return out


CUTLASS_DTYPES = {"cutlass::half_t": "fp16", "cutlass::bfloat16_t": "bf16", "cutlass::float_e4m3_t": "fp8"}


def name_disagrees(parts: dict[str, Any], spec: dict[str, Any]) -> Optional[str]:
    """Where a kernel file's name and the specialization it defines say different things, or None."""
    args = spec["template_args"]
    if len(args) < 2:
        return f"{len(args)} template arguments"
    if CUTLASS_DTYPES.get(args[0]) != parts["dtype"]:
        return f"dtype {parts['dtype']} in the name, {args[0]} in the text"
    if args[1] != str(parts["hdim"]):
        return f"hdim {parts['hdim']} in the name, {args[1]} in the text"
    causal = {"true": True, "false": False}.get(args[2]) if len(args) > 2 else None
    if len(args) > 2 and causal is None:
        return f"third template argument {args[2]}"
    if (parts["causal"] is True) != (causal is True):
        return f"causal {parts['causal']} in the name, {args[2] if len(args) > 2 else 'no causal argument'} in the text"
    return None


# ---------------------------------------------------------------- setup.py, statically

@dataclass(frozen=True)
class Unknown:
    """A value the static reading cannot know, and why."""
    why: str


@dataclass
class V:
    value: Any
    env: frozenset = frozenset()    # (name, default) of os.getenv lookups the value depends on
    globs: frozenset = frozenset()  # (pattern, line, matched) of glob calls it depends on


def _join(*vs: V) -> dict[str, frozenset]:
    return {"env": frozenset().union(*(v.env for v in vs)), "globs": frozenset().union(*(v.globs for v in vs))}


def _unknown(v: V) -> Optional[Unknown]:
    if isinstance(v.value, Unknown):
        return v.value
    return None


class _PathStr(str):
    """A str built with pathlib.Path: `/` joins."""


def _assigned(stmts: Iterable[ast.stmt]) -> set[str]:
    """Names a block binds or mutates (x = ..., x += ..., x.append(...), for x in ...)."""
    out: set[str] = set()
    for st in stmts:
        for n in ast.walk(st):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                out.add(n.id)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                    and n.func.attr in ("append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse"):
                out.add(n.func.value.id)
    return out


def glob_match(pattern: str, members: list[str], recursive: bool = False) -> list[str]:
    """The files of `members` (paths relative to setup.py's folder) that glob.glob(pattern) returns,
    sorted (glob itself returns them in the file system's order). Hidden files match only a
    pattern that names the dot, as in glob."""
    pattern = posixpath.normpath(pattern) if pattern else pattern
    rx = []
    for i, seg in enumerate(pattern.split("/")):
        if recursive and seg == "**":
            rx.append(r"(?:[^/.][^/]*/)*")
            continue
        part = ""
        j = 0
        while j < len(seg):
            c = seg[j]
            if c == "*":
                part += "[^/]*"
            elif c == "?":
                part += "[^/]"
            elif c == "[":
                k = seg.find("]", j + 2)
                if k < 0:
                    part += re.escape(c)
                else:
                    body = seg[j + 1:k]
                    part += "[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]"
                    j = k
            else:
                part += re.escape(c)
            j += 1
        if not seg.startswith(".") and any(ch in seg for ch in "*?["):
            part = r"(?!\.)" + part
        rx.append(part + "/")
    full = re.compile("".join(rx)[:-1] if rx and rx[-1].endswith("/") else "".join(rx))
    return sorted(m for m in members if full.fullmatch(m))


@dataclass
class Extension:
    name: Optional[str]
    line: int
    guard: list[str]
    sources: Optional[list[str]]
    computed: bool
    unreadable: Optional[str] = None
    assumed_env: dict[str, Optional[str]] = field(default_factory=dict)
    globs: list[dict[str, Any]] = field(default_factory=list)


class _NotCudaPath(Exception):
    pass


class SetupReader:
    """Evaluate one CUDAExtension call of a setup.py statically (see the module docstring)."""

    def __init__(self, tree: ast.Module, members: list[str]):
        self.tree = tree
        self.members = members
        self.final: Optional[ast.AST] = None  # what to evaluate where the walk reaches its target
        self.env: dict[str, V] = {}
        self.imports: dict[str, str] = {}  # local name -> qualified name
        self.guard: list[str] = []

    # -- statements
    def run_block(self, stmts: list[ast.stmt], chain: list[ast.AST], target: ast.Call) -> V:
        for st in stmts:
            if chain and st is chain[0]:
                return self.run_on_path(st, chain[1:], target)
            self.run(st)
        raise AssertionError("the chain leaves the block")

    def run_on_path(self, st: ast.stmt, chain: list[ast.AST], target: ast.Call) -> V:
        if isinstance(st, ast.If) and chain:
            in_body = any(chain[0] is s for s in st.body)
            t = self.truth(st.test)
            text = ast.unparse(st.test)
            self.guard.append(text if in_body else f"not ({text})")
            if t is not None and t != in_body:
                raise _NotCudaPath(text)
            return self.run_block(st.body if in_body else st.orelse, chain, target)
        if isinstance(st, (ast.With, ast.FunctionDef)) and chain:
            return self.run_block(st.body, chain, target)
        if isinstance(st, ast.Try) and chain:
            for block in (st.body, st.orelse, st.finalbody, *[h.body for h in st.handlers]):
                if any(chain[0] is s for s in block):
                    return self.run_block(block, chain, target)
        if isinstance(st, (ast.For, ast.While)) and chain:
            return V(Unknown(f"the call at line {target.lineno} is inside a loop (line {st.lineno})"))
        if self.final is None:
            return V(Unknown(f"the call at line {target.lineno} has no such argument"))
        return self.eval(self.final)

    def bind(self, target: ast.AST, v: V) -> None:
        if isinstance(target, ast.Name):
            if target.id not in PINNED_FALSE:
                self.env[target.id] = v
        elif isinstance(target, (ast.Tuple, ast.List)):
            if _unknown(v) is None and isinstance(v.value, (list, tuple)) and len(v.value) == len(target.elts):
                for t, x in zip(target.elts, v.value):
                    self.bind(t, V(x, **_join(v)))
            else:
                why = _unknown(v) or Unknown(f"cannot unpack into {ast.unparse(target)}")
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        self.bind(n, V(why))

    def forget(self, names: Iterable[str], why: str) -> None:
        for n in names:
            if n not in PINNED_FALSE:
                self.env[n] = V(Unknown(why))

    def run(self, st: ast.stmt) -> None:  # noqa: C901 (an interpreter: docs/architecture.md)
        if isinstance(st, ast.Assign):
            v = self.eval(st.value)
            for t in st.targets:
                self.bind(t, v)
        elif isinstance(st, ast.AnnAssign) and st.value is not None:
            self.bind(st.target, self.eval(st.value))
        elif isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name):
            self.bind(st.target, self.binop(st.op, self.eval(st.target), self.eval(st.value), st))
        elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Attribute) \
                and isinstance(st.value.func.value, ast.Name) and st.value.func.attr in ("append", "extend", "insert"):
            self.mutate(st.value)
        elif isinstance(st, ast.If):
            tv = self.eval(st.test)
            if (undecided := _unknown(tv)):
                self.forget(_assigned(st.body + st.orelse), f"assigned under `{ast.unparse(st.test)}` (line {st.lineno}), "
                                                             f"which a static reading cannot decide: {undecided.why}")
            else:
                for s in st.body if tv.value else st.orelse:
                    self.run(s)
                for n in _assigned(st.body + st.orelse):  # what either branch binds depends on the test
                    if n in self.env and not _unknown(self.env[n]):
                        self.env[n] = V(self.env[n].value, **_join(self.env[n], tv))
        elif isinstance(st, ast.For):
            it = self.eval(st.iter)
            if _unknown(it) or not isinstance(it.value, (list, tuple, str, dict)) or len(it.value) > MAX_ITEMS:
                why = it.value.why if _unknown(it) else "not a list to expand"
                self.forget(_assigned([st]), f"assigned in the loop at line {st.lineno} over {ast.unparse(st.iter)}: {why}")
                return
            for x in list(it.value):
                self.bind(st.target, V(x, **_join(it)))
                for s in st.body:
                    self.run(s)
            for s in st.orelse:
                self.run(s)
        elif isinstance(st, ast.While):
            self.forget(_assigned([st]), f"assigned in the while loop at line {st.lineno}")
        elif isinstance(st, ast.Try):
            for s in st.body + st.orelse + st.finalbody:
                self.run(s)
            self.forget(_assigned(s for h in st.handlers for s in h.body) - _assigned(st.body),
                        f"assigned in an except block (line {st.lineno})")
        elif isinstance(st, ast.With):
            for s in st.body:
                self.run(s)
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.forget([st.name], f"{st.name} is defined in setup.py (line {st.lineno}): its result is not read")
        elif isinstance(st, ast.Import):
            for a in st.names:
                local = a.asname or a.name.split(".")[0]
                if local not in PINNED_FALSE:
                    self.imports[local] = a.name if a.asname else a.name.split(".")[0]
                    self.env.pop(local, None)
        elif isinstance(st, ast.ImportFrom):
            for a in st.names:
                local = a.asname or a.name
                if local not in PINNED_FALSE:
                    self.imports[local] = f"{st.module}.{a.name}"
                    self.env.pop(local, None)

    def mutate(self, call: ast.Call) -> None:
        assert isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
        name, op = call.func.value.id, call.func.attr
        cur = self.env.get(name, V(Unknown(f"{name} is not bound")))
        args = [self.eval(a) for a in call.args]
        bad = _unknown(cur) or next((u for a in args if (u := _unknown(a))), None)
        if bad or not isinstance(cur.value, list):
            self.bind(ast.Name(id=name, ctx=ast.Store()), V(bad or Unknown(f"{name}.{op} on a non-list")))
            return
        new = list(cur.value)
        try:
            if op == "append" and len(args) == 1:
                new.append(args[0].value)
            elif op == "extend" and len(args) == 1:
                new.extend(list(args[0].value))
            elif op == "insert" and len(args) == 2:
                new.insert(args[0].value, args[1].value)
            else:
                raise TypeError
        except TypeError:
            self.bind(ast.Name(id=name, ctx=ast.Store()), V(Unknown(f"{ast.unparse(call)} (line {call.lineno})")))
            return
        self.bind(ast.Name(id=name, ctx=ast.Store()), V(new, **_join(cur, *args)))

    # -- expressions
    def truth(self, node: ast.AST) -> Optional[bool]:
        v = self.eval(node)
        return None if _unknown(v) else bool(v.value)

    def qualname(self, node: ast.AST) -> Optional[str]:
        if isinstance(node, ast.Name):
            if node.id in self.env:
                return None
            return self.imports.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return None if base is None else f"{base}.{node.attr}"
        return None

    def binop(self, op: ast.operator, a: V, b: V, node: ast.AST) -> V:
        if (u := _unknown(a) or _unknown(b)):
            return V(u)
        x, y = a.value, b.value
        try:
            if isinstance(op, ast.Add):
                r = x + y
            elif isinstance(op, ast.Mult):
                r = x * y
            elif isinstance(op, ast.Mod) and isinstance(x, str):
                r = x % y
            elif isinstance(op, ast.Div) and isinstance(x, _PathStr) and isinstance(y, str):
                r = _PathStr(posixpath.join(x, y))
            elif isinstance(op, ast.Sub) and all(isinstance(z, (int, float)) for z in (x, y)):
                r = x - y
            else:
                return V(Unknown(f"the operation {ast.unparse(node)} (line {getattr(node, 'lineno', 0)})"))
        except Exception:  # noqa: BLE001 - a type error in upstream code is a value we cannot know
            return V(Unknown(f"{ast.unparse(node)} (line {getattr(node, 'lineno', 0)}) fails"))
        return V(r, **_join(a, b))

    def eval(self, node: ast.AST) -> V:  # noqa: C901 (an interpreter: one case per node type)
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant):
            return V(node.value)
        if isinstance(node, ast.Name):
            if node.id in PINNED_FALSE:
                return V(False)
            if node.id in self.env:
                return self.env[node.id]
            if node.id == "__file__":
                return V("setup.py")
            return V(Unknown(f"{node.id} (line {line}) is not a value setup.py computes"))
        if isinstance(node, (ast.List, ast.Tuple)):
            items, parts = [], []
            for e in node.elts:
                if isinstance(e, ast.Starred):
                    v = self.eval(e.value)
                    if _unknown(v):
                        return v
                    items.extend(list(v.value))
                else:
                    v = self.eval(e)
                    if _unknown(v):
                        return v
                    items.append(v.value)
                parts.append(v)
            return V(items if isinstance(node, ast.List) else tuple(items), **_join(*parts))
        if isinstance(node, ast.Dict):
            keys = [self.eval(k) if k is not None else V(Unknown("**")) for k in node.keys]
            vals = [self.eval(v) for v in node.values]
            if (u := next((_unknown(x) for x in keys + vals if _unknown(x)), None)):
                return V(u)
            return V({k.value: v.value for k, v in zip(keys, vals)}, **_join(*keys, *vals))
        if isinstance(node, ast.JoinedStr):
            out, parts = "", []
            for p in node.values:
                if isinstance(p, ast.Constant):
                    out += str(p.value)
                    continue
                assert isinstance(p, ast.FormattedValue)
                v = self.eval(p.value)
                if _unknown(v):
                    return v
                if p.format_spec is not None or p.conversion not in (-1, ord("s")):
                    return V(Unknown(f"a formatted value with a conversion (line {line})"))
                out += str(v.value)
                parts.append(v)
            return V(out, **_join(*parts))
        if isinstance(node, ast.BinOp):
            return self.binop(node.op, self.eval(node.left), self.eval(node.right), node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            v = self.eval(node.operand)
            return v if _unknown(v) else V(not v.value, **_join(v))
        if isinstance(node, ast.BoolOp):
            vals = [self.eval(x) for x in node.values]
            is_and = isinstance(node.op, ast.And)
            for v in vals:  # a decided operand that short-circuits decides the whole
                if not _unknown(v) and bool(v.value) != is_and:
                    return v
            if (u := next((_unknown(v) for v in vals if _unknown(v)), None)):
                return V(u)
            return V(vals[-1].value, **_join(*vals))
        if isinstance(node, ast.Compare):
            vals = [self.eval(node.left)] + [self.eval(c) for c in node.comparators]
            if (u := next((_unknown(v) for v in vals if _unknown(v)), None)):
                return V(u)
            ops = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.In: lambda a, b: a in b,
                   ast.NotIn: lambda a, b: a not in b, ast.Is: lambda a, b: a is b, ast.IsNot: lambda a, b: a is not b}
            ok = True
            for op, a, b in zip(node.ops, vals, vals[1:]):
                f = ops.get(type(op))
                if f is None:
                    return V(Unknown(f"the comparison {ast.unparse(node)} (line {line})"))
                try:
                    ok = ok and f(a.value, b.value)
                except TypeError:
                    return V(Unknown(f"the comparison {ast.unparse(node)} (line {line})"))
            return V(ok, **_join(*vals))
        if isinstance(node, ast.IfExp):
            t = self.eval(node.test)
            if _unknown(t):
                return t
            v = self.eval(node.body if t.value else node.orelse)
            return v if _unknown(v) else V(v.value, **_join(t, v))
        if isinstance(node, ast.Subscript):
            base, idx = self.eval(node.value), self.eval(node.slice)
            if (u := _unknown(base) or _unknown(idx)):
                return V(u)
            try:
                return V(base.value[idx.value], **_join(base, idx))
            except (KeyError, IndexError, TypeError):
                return V(Unknown(f"{ast.unparse(node)} (line {line}) fails"))
        if isinstance(node, ast.Slice):
            parts = [self.eval(x) if x is not None else V(None) for x in (node.lower, node.upper, node.step)]
            if (u := next((_unknown(v) for v in parts if _unknown(v)), None)):
                return V(u)
            return V(slice(*(p.value for p in parts)), **_join(*parts))
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
            return self.comprehension(node)
        if isinstance(node, ast.Attribute):
            owner: Optional[V] = self.eval(node.value) if not self.qualname(node.value) else None
            if owner is not None and not _unknown(owner) and isinstance(owner.value, _PathStr) and node.attr == "parent":
                return V(_PathStr(posixpath.dirname(owner.value) or ".."), **_join(owner))
            return V(Unknown(f"{ast.unparse(node)} (line {line})"))
        if isinstance(node, ast.Call):
            return self.call(node)
        return V(Unknown(f"{type(node).__name__} at line {line}: {ast.unparse(node)[:80]}"))

    def comprehension(self, node: ast.ListComp | ast.GeneratorExp) -> V:
        out: list[Any] = []
        deps: list[V] = []
        saved = dict(self.env)

        def go(i: int) -> Optional[Unknown]:
            if i == len(node.generators):
                v = self.eval(node.elt)
                if _unknown(v):
                    return _unknown(v)
                out.append(v.value)
                deps.append(v)
                if len(out) > MAX_ITEMS:
                    return Unknown("a comprehension too long to expand")
                return None
            g = node.generators[i]
            it = self.eval(g.iter)
            if _unknown(it):
                return _unknown(it)
            deps.append(it)
            for x in list(it.value):
                self.bind(g.target, V(x))
                skip = False
                for cond in g.ifs:
                    c = self.eval(cond)
                    if _unknown(c):
                        return _unknown(c)
                    deps.append(c)
                    if not c.value:
                        skip = True
                        break
                if not skip and (u := go(i + 1)):
                    return u
            return None

        try:
            u = go(0)
        finally:
            self.env = saved
        return V(u) if u else V(out, **_join(*deps))

    def call(self, node: ast.Call) -> V:
        line = node.lineno
        q = self.qualname(node.func)
        if q is None and isinstance(node.func, ast.Attribute):  # a method of a computed value
            base = self.eval(node.func.value)
            if _unknown(base):
                return base
            args = [self.eval(a) for a in node.args]
            if (u := next((_unknown(a) for a in args if _unknown(a)), None)):
                return V(u)
            if isinstance(base.value, str) and node.func.attr in ("split", "replace", "lower", "upper", "strip",
                                                                  "startswith", "endswith", "format", "join", "rsplit"):
                try:
                    r = getattr(base.value, node.func.attr)(*(a.value for a in args))
                except Exception:  # noqa: BLE001
                    return V(Unknown(f"{ast.unparse(node)} (line {line}) fails"))
                return V(r, **_join(base, *args))
            if isinstance(base.value, dict) and node.func.attr == "get":
                try:
                    return V(base.value.get(*(a.value for a in args)), **_join(base, *args))
                except TypeError:
                    return V(Unknown(f"{ast.unparse(node)} (line {line}) fails"))
            return V(Unknown(f"{ast.unparse(node)[:80]} (line {line})"))
        args = [self.eval(a) for a in node.args]
        kw = {k.arg: self.eval(k.value) for k in node.keywords if k.arg}
        if q in ("os.getenv", "os.environ.get"):
            name = args[0] if args else None
            if name is None or _unknown(name) or len(args) > 2:
                return V(Unknown(f"{ast.unparse(node)} (line {line})"))
            default = args[1] if len(args) > 1 else kw.get("default", V(None))
            if _unknown(default):
                return default
            return V(default.value, env=frozenset({(name.value, default.value)}) | default.env, globs=default.globs)
        if (u := next((_unknown(a) for a in [*args, *kw.values()] if _unknown(a)), None)):
            return V(u)
        vals = [a.value for a in args]
        deps = _join(*args, *kw.values())
        if q in ("glob.glob", "glob.iglob"):
            if len(vals) != 1 or not isinstance(vals[0], str) or set(kw) - {"recursive"}:
                return V(Unknown(f"{ast.unparse(node)} (line {line})"))
            rec = bool(kw["recursive"].value) if "recursive" in kw else False
            hits = glob_match(vals[0], self.members, rec)
            return V(hits, env=deps["env"], globs=deps["globs"] | {(vals[0], line, len(hits))})
        simple: dict[str, Any] = {
            "sorted": sorted, "list": list, "tuple": tuple, "len": len, "str": str, "set": set,
            "os.path.join": posixpath.join, "os.path.dirname": posixpath.dirname, "os.path.basename": posixpath.basename,
            "os.path.abspath": lambda p: p, "os.path.realpath": lambda p: p, "os.path.normpath": posixpath.normpath,
            "itertools.product": lambda *xs: list(itertools.product(*xs)),
            "pathlib.Path": lambda *xs: _PathStr(posixpath.join(*xs) if xs else ""),
        }
        if q in simple and not kw:
            try:
                r = simple[q](*vals)
            except Exception:  # noqa: BLE001
                return V(Unknown(f"{ast.unparse(node)} (line {line}) fails"))
            return V(r, **deps)
        return V(Unknown(f"calls {ast.unparse(node.func)} (line {line})"))

def _chain(tree: ast.Module, target: ast.AST) -> list[ast.AST]:
    """The statements from the module down to the one holding `target`."""
    parent: dict[int, ast.AST] = {}
    for n in ast.walk(tree):
        for c in ast.iter_child_nodes(n):
            parent[id(c)] = n
    out: list[ast.AST] = []
    cur: Optional[ast.AST] = target
    while cur is not None and cur is not tree:
        if isinstance(cur, ast.stmt):
            out.append(cur)
        cur = parent.get(id(cur))
    return out[::-1]


def _argument(call: ast.Call, name: str, position: int) -> Optional[ast.expr]:
    node = next((k.value for k in call.keywords if k.arg == name), None)
    if node is None and len(call.args) > position and not any(isinstance(a, ast.Starred) for a in call.args[:position + 1]):
        node = call.args[position]
    return node


def value_at(tree: ast.Module, members: list[str], call: ast.Call, node: Optional[ast.AST]) -> tuple[V, list[str]]:
    """`node` (an argument of `call`) evaluated where setup.py makes `call`, with the guards on the way.
    Raises _NotCudaPath where a guard on the way is decided against the CUDA path."""
    r = SetupReader(tree, members)
    r.final = node
    v = r.run_block(tree.body, _chain(tree, call), call)
    return v, r.guard


def extension_calls(tree: ast.Module) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and ((isinstance(n.func, ast.Name) and n.func.id == "CUDAExtension")
                 or (isinstance(n.func, ast.Attribute) and n.func.attr == "CUDAExtension"))]


def read_extension(tree: ast.Module, members: list[str], names: Optional[tuple[str, ...]] = EXTENSION_NAMES) -> Optional[Extension]:
    """The CUDAExtension (named one of `names`; any name where None) on setup.py's CUDA path, its
    sources evaluated statically; None where setup.py has none."""
    found: list[Extension] = []
    for call in sorted(extension_calls(tree), key=lambda c: c.lineno):
        name_node = _argument(call, "name", 0)
        try:
            nm, _ = value_at(tree, members, call, name_node)
            v, guard = value_at(tree, members, call, _argument(call, "sources", 1))
        except _NotCudaPath:
            continue
        name = None if _unknown(nm) else str(nm.value)
        if names is not None and name not in names:
            continue
        src_node = _argument(call, "sources", 1)
        literal = isinstance(src_node, ast.List) and all(isinstance(e, ast.Constant) for e in src_node.elts)
        u = _unknown(v)
        ok = u is None and isinstance(v.value, (list, tuple)) and all(isinstance(s, str) for s in v.value)
        found.append(Extension(
            name=name, line=call.lineno, guard=guard,
            sources=[str(s) for s in v.value] if ok else None, computed=not literal,
            unreadable=None if ok else (u.why if u else f"sources is not a list of strings: {type(v.value).__name__}"),
            assumed_env={k: d for k, d in sorted(v.env, key=lambda kd: kd[0])} if ok else {},
            globs=[{"pattern": p, "line": ln, "matched": m} for p, ln, m in sorted(v.globs, key=lambda g: (g[1], g[0]))] if ok else [],
        ))
    if not found:
        return None
    if len(found) > 1:
        lines = ", ".join(str(e.line) for e in found)
        return Extension(name=found[0].name, line=found[0].line, guard=found[0].guard, sources=None, computed=True,
                         unreadable=f"{len(found)} CUDAExtension calls named {found[0].name} on the CUDA path (lines {lines})")
    return found[0]


# ---------------------------------------------------------------- hopper/setup.py (FlashAttention 3)

def _quote(lines: list[str], line: int) -> dict[str, Any]:
    return {"line": line, "quote": lines[line - 1].strip() if 0 < line <= len(lines) else ""}


_GENCODE = re.compile(r"arch=compute_(\d+)([a-z]?),code=sm_(\d+)([a-z]?)")


def gencode_quotes(tree: ast.Module, text: str) -> list[dict[str, Any]]:
    """Every `X.append("arch=compute_..,code=sm_..")` of a setup.py, with its line as written."""
    lines = text.splitlines()
    out, seen = [], set()
    for n in sorted(ast.walk(tree), key=lambda n: getattr(n, "lineno", 0)):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "append" and n.args \
                and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str):
            m = _GENCODE.fullmatch(n.args[0].value)
            if m and n.args[0].value not in seen:
                seen.add(n.args[0].value)
                d = m.group(3)
                out.append({"gencode": n.args[0].value, "arch": f"{d[:-1]}.{d[-1]}{m.group(4)}", **_quote(lines, n.lineno)})
    return out


def nvcc_floor_quote(tree: ast.Module, text: str) -> Optional[dict[str, Any]]:
    """`if bare_metal_version < Version("X"): raise ...` -> X with the line."""
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and len(n.test.ops) == 1 \
                and isinstance(n.test.ops[0], ast.Lt) and isinstance(n.test.left, ast.Name) \
                and n.test.left.id == "bare_metal_version" and any(isinstance(s, ast.Raise) for s in n.body):
            c = n.test.comparators[0]
            if isinstance(c, ast.Call) and len(c.args) == 1 and isinstance(c.args[0], ast.Constant):
                return {"version": str(c.args[0].value), **_quote(text.splitlines(), n.lineno)}
    return None


def _setup_call(tree: ast.Module) -> Optional[ast.Call]:
    return next((n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "setup"), None)


def package_name(tree: ast.Module, text: str, members: list[str]) -> Optional[dict[str, Any]]:
    """setup(name=...) evaluated, with the line that spells the name (the constant's assignment
    where name= is a module-level constant)."""
    call = _setup_call(tree)
    node = _argument(call, "name", 0) if call is not None else None
    if call is None or node is None:
        return None
    lines = text.splitlines()
    try:
        v, _ = value_at(tree, members, call, node)
    except _NotCudaPath:
        return None
    line = node.lineno
    if isinstance(node, ast.Name):
        assigns = [s for s in tree.body if isinstance(s, ast.Assign) and s.lineno < call.lineno
                   and any(isinstance(t, ast.Name) and t.id == node.id for t in s.targets)]
        if assigns:
            line = assigns[-1].lineno
    return {"name": None if _unknown(v) else v.value, **_quote(lines, line)}


def hopper_facts(text: str, members: list[str]) -> dict[str, Any]:
    """hopper/setup.py: the package it builds, its CUDA extension, the arch flags and nvcc floor,
    each with its line; how many of the extension's sources (statically evaluated, relative to
    hopper/) the sdist ships. `members` are the sdist's files under hopper/, relative to it."""
    tree = ast.parse(text)
    lines = text.splitlines()
    ext = read_extension(tree, members, names=None)
    out: dict[str, Any] = {"package": package_name(tree, text, members)}
    if ext is None:
        out["extension"] = None
    else:
        call = next(c for c in extension_calls(tree) if c.lineno == ext.line)
        name_node = _argument(call, "name", 0)
        src: dict[str, Any] = {"listed": None if ext.sources is None else len(ext.sources)}
        if ext.sources is None:
            src["unreadable"] = ext.unreadable
        else:
            have = set(members)
            src["in_sdist"] = sum(1 for s in ext.sources if posixpath.normpath(s) in have)
            src["assumed_env"] = ext.assumed_env
            suffixes: dict[str, int] = {}
            for s in ext.sources:
                m = re.search(r"_(sm\d+[a-z]?)\.cu$", s)
                key = m.group(1) if m else ("other .cu" if s.endswith(".cu") else "other")
                suffixes[key] = suffixes.get(key, 0) + 1
            src["by_arch_suffix"] = suffixes
        out["extension"] = {"name": ext.name, **_quote(lines, name_node.lineno if name_node is not None else ext.line),
                            "sources": src}
    out["gencode"] = gencode_quotes(tree, text)
    out["per_file_rules"] = suffix_rules(tree, text)
    out["nvcc_floor"] = nvcc_floor_quote(tree, text)
    return out


def suffix_rules(tree: ast.Module, text: str) -> list[dict[str, Any]]:
    """`if source_file.endswith('_sm80.cu'): rule = 'cuda_compile_sm80'`: the ninja rule (and so
    the gencode) hopper/setup.py gives a source by its name's ending, with the line."""
    lines = text.splitlines()
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and isinstance(n.test, ast.Call) and isinstance(n.test.func, ast.Attribute) \
                and n.test.func.attr == "endswith" and n.test.args and isinstance(n.test.args[0], ast.Constant):
            rule = next((st.value.value for st in n.body if isinstance(st, ast.Assign) and isinstance(st.value, ast.Constant)
                         and any(isinstance(t, ast.Name) and t.id == "rule" for t in st.targets)), None)
            if rule is not None:
                out.append({"suffix": str(n.test.args[0].value), "rule": str(rule), **_quote(lines, n.lineno)})
    return sorted(out, key=lambda r: r["line"])


# ---------------------------------------------------------------- the record of the main extension

def extension_sources(text: str, members: list[str]) -> Optional[Extension]:
    """The flash_attn_2_cuda (older: flash_attn_cuda) CUDAExtension on setup.py's CUDA path."""
    return read_extension(ast.parse(text), members)


def cuda_extension(ext: Optional[Extension], files: dict[str, bytes], file: str = "setup.py") -> Optional[dict[str, Any]]:
    """The extract's `cuda_extension`: name, the call's line and guards, and each source with its
    path, whether the sdist has it, its git blob; a kernel .cu with its name parts and the template
    specialization its text defines. `files`: the sdist's members the sources name."""
    if ext is None:
        return None
    out: dict[str, Any] = {"name": ext.name, "file": file, "line": ext.line, "guard": ext.guard, "computed": ext.computed}
    if ext.computed and ext.sources is not None:
        out["assumed_env"] = ext.assumed_env
        out["globs"] = ext.globs
    if ext.sources is None:
        out["sources"] = None
        out["unreadable"] = ext.unreadable
        return out
    parsed = {s: kernel_name(s) for s in ext.sources}
    causal_split = {(p["kind"], p["hdim"], p["dtype"], p["arch"]) for p in parsed.values() if p and p["causal"]}
    sources, disagree = [], []
    for s in ext.sources:
        data = files.get(posixpath.normpath(s))
        rec: dict[str, Any] = {"path": s, "in_sdist": data is not None, "blob": None if data is None else git_blob(data)}
        if s.endswith(".cu"):
            parts = parsed[s]
            if parts is None:
                rec.update({"kind": None, "hdim": None, "dtype": None, "causal": None, "arch": None})
            else:
                if parts["causal"] is None and (parts["kind"], parts["hdim"], parts["dtype"], parts["arch"]) in causal_split:
                    parts = {**parts, "causal": False}
                rec.update(parts)
            specs = specializations(data.decode("utf-8", "replace")) if data is not None else []
            rec["specialization"] = specs[0] if len(specs) == 1 else None
            if data is not None and len(specs) != 1:
                disagree.append({"path": s, "why": f"{len(specs)} specializations in the text"})
            elif parts is not None and specs:
                why = name_disagrees(parts, specs[0])
                if why:
                    disagree.append({"path": s, "why": why})
        sources.append(rec)
    out["sources"] = sources
    out["name_text_disagreements"] = disagree
    return out
