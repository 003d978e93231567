"""Model formulas: user text is parsed here, never evaluated.

A formula in ``plan.yaml`` or ``clinrel adjust --formula`` is data, read in three steps:

1. A character scan (:meth:`_Reader.scan`) admits ASCII names, decimal numbers, quoted
   text without backslashes or control characters, ``~ + - * / : ** ( ) , = | .``; ``.``
   only in ``np.<transform>``, a name before ``(`` only if it is an allowed function,
   no Python keywords or ``__`` names. It stays hand-written because the maintained
   tokenizers accept what it refuses: Python's (which patsy uses) takes non-ASCII names,
   which the ``ast`` then folds (``ｐhase`` is ``phase``), and backslash escapes; patsy
   reports an odd character only as "error tokenizing input".
2. patsy's own formula parser (``patsy.parse_formula``, with ``|`` added for lme4's
   ``(1 | group)``) gives the operator tree. clinrel walks it: ``a*b`` is ``a + b + a:b``,
   ``1``/``0``/``- 1`` set the intercept, ``(1 | group)`` once at the top level is the
   random intercept; ``-`` otherwise, ``/``, ``**`` and numbers as terms are refused, and
   the terms are counted while they are expanded (patsy's ``ModelDesc`` would expand
   ``x1*...*x40`` before anyone could count).
3. Each factor's text is parsed by Python's ``ast`` and must match the allowlist:
   ``column``, ``Q("odd name")``, ``C(column)``, ``C(column, Treatment([reference=]level))``,
   ``I(column op number)``, ``f(column)``, ``f(column op number)``; ``f`` one of np.log log
   np.log2 log2 np.log10 log10 np.sqrt sqrt np.exp exp scale center, ``op`` one of
   ``+ - * / **``.

Anything else raises :class:`FormulaError` (a :class:`stats.schema.ContractError`: the CLI
exits 2) naming the term and the character position and listing what is allowed. patsy
then builds the design from code :class:`ParsedFormula` writes from the matched tree
(names re-quoted, numbers as scanned; a column name no plain literal can hold is refused)
in :func:`closed_environment`: the closed function list, no Python builtins, no private
attributes. Term names stay patsy's (``phase[T.delayed]``, ``np.log(tumor_size_mm)``,
``C(phase, Treatment('venous'))[T.arterial]``): estimates and names equal a direct patsy
fit of the same valid formula (tests/safety/test_formula_code.py). formulaic is not used: a new
dependency for the same operator parse (its factors are Python code too, so the scan and
the allowlist would remain), while patsy builds the design either way.
"""
from __future__ import annotations

import ast
import difflib
import keyword
import re
import types
from dataclasses import dataclass, replace
from typing import Iterable

import numpy as np
import patsy
from patsy.eval import VarLookupDict
from patsy.infix_parser import Operator
from patsy.parse_formula import parse_formula as _patsy_parse

from stats.schema import ContractError

__all__ = ["FormulaError", "ParsedFormula", "parse_formula", "ALLOWED", "CLOSED_NAMESPACE",
           "ClosedEnvironment", "closed_environment"]

MAX_LENGTH = 4000        # characters of formula text
MAX_TERMS = 256          # fixed-effect terms after expanding '*'
MAX_DEPTH = 16           # nested parentheses

ALLOWED = ("allowed: column names (plain ASCII names, or Q(\"odd name\") for names with "
           "spaces or symbols); + : * and ( ); 1, 0 or -1 for the intercept; (1 | group) or "
           "(1 | group/inner) once; C(col), C(col, Treatment('level')), "
           "C(col, Treatment(reference='level')); np.log, log, np.log2, log2, np.log10, "
           "log10, np.sqrt, sqrt, np.exp, exp, scale, center of a column or of 'column op "
           "number'; I(column op number) with op one of + - * / **")
MSG_FORMULA = "formula {formula!r}: {problem} in term {term!r} at character {pos}; " + ALLOWED
MSG_NOT_TEXT = "formula must be text such as 'detected ~ phase + sex'; got {got!r}"
MSG_TOO_LONG = ("formula is {n} characters long; at most {limit} are accepted; shorten it or "
                "fit fewer terms")
MSG_TOO_MANY_TERMS = ("formula {formula!r}: expands to {n} terms (more than {limit}); "
                      "fit fewer interactions")
MSG_NO_TILDE = ("formula {formula!r} needs a '~' between the outcome and the terms, e.g. "
                "'detected ~ phase + sex'")
MSG_NO_TERMS = ("formula {formula!r}: the right-hand side has no terms and no intercept; "
                "add a term or remove '0'/'-1'")
MSG_UNKNOWN_COLUMNS = ("{source}: the formula {formula!r} names column(s) {columns} that the "
                       "table lacks{hint} (columns present: {present}); fix the formula or "
                       "add the columns")
MSG_UNQUOTABLE = ("column {name!r} cannot be named in a formula (both quote characters, a "
                  "backslash or a control character); rename the column")

# problems (the {problem} of MSG_FORMULA)
P_CHAR = "character {char!r} (U+{code:04X}) is not allowed{why}"
P_UNKNOWN_FUNCTION = "unknown function {name!r}"
P_ATTRIBUTE = ("attribute access ({name!r}) is not allowed (only np.log, np.log2, np.log10, "
               "np.sqrt, np.exp); quote a column name with dots as Q(\"a.b\")")
P_NP_FUNCTION = "{name!r} is not an allowed function"
P_KEYWORD = "the Python keyword {name!r} is not allowed (quote a column of that name: Q(\"{name}\"))"
P_DUNDER = "names starting with '__' are not allowed ({name!r}); quote such a column: Q(\"{name}\")"
P_PREFIX = "string prefixes such as {name}'...' (f-strings, bytes, raw) are not allowed"
P_STRING = "quoted text is allowed only as Q(\"column\") or a Treatment('level')"
P_UNTERMINATED = "the quoted text is not closed"
P_QUOTE_CHAR = "quoted text may not hold backslashes or control characters"
P_NUMBER_TERM = "the number {text} is not a term (numbers go inside I(), e.g. I(age / 10))"
P_BAD_NUMBER = "malformed number {text!r} (write decimals such as 10, 0.5 or 1e-3)"
P_ASSIGN = "assignment ':=' is not allowed"
P_DEPTH = f"more than {MAX_DEPTH} nested parentheses"
P_MINUS = "'-' may only remove the intercept ('- 1'); leave a term out instead of subtracting it"
P_EXPECTED = "expected {what}, found {found}"
P_RANDOM = ("only a random intercept '(1 | group)' (or nested, '(1 | group/inner)') is "
            "supported, once, at the top level")
P_ARGUMENTS = "{name}() takes {takes}"
P_SECOND_TILDE = "a second '~'"
P_SYNTAX = "{found} is not a column, a number or an allowed function call ({why})"
_TAKES = {"C": "a column and optionally Treatment('reference level')",
          "I": "'column op number', op one of + - * / **",
          "Q": "one quoted column name, e.g. Q(\"tumor size\")"}
#: operator-tree nodes that are not terms
P_NODE = {"ONE": "the intercept (1, 0, -1) may appear only at the top level of the sum",
          "-": P_MINUS, "|": P_RANDOM, "/": "'/' (nesting) is not supported; write a + a:b",
          "**": "'**' is allowed only inside I(), e.g. I(age ** 2)"}
P_NODE["ZERO"] = P_NODE["ONE"]
_QUOTE_HINT = " (quote odd column names as Q(\"name\"))"
_HINTS = {"[": " (subscripts are not allowed)", "#": " (comments are not allowed)",
          "`": " (backquoted names are not supported: quote odd column names as Q(\"name\"))",
          "^": " ('^' is not supported: write the interactions out, e.g. (a + b)*c)"}

# --------------------------------------------------------------------------- names

_NP = types.SimpleNamespace(log=np.log, log2=np.log2, log10=np.log10, sqrt=np.sqrt, exp=np.exp)
_LOG = ("the log of zero or a negative value is not finite",
        "or shift the values, e.g. {f}({col} + 1)")
_SQRT = (np.sqrt, "the square root of a negative value is not defined", "")
_EXP = (np.exp, "exp overflows for values above 709", "or rescale, e.g. I(col / 100)")
#: elementwise transforms: name as written -> (numpy function, what breaks, the fix)
TRANSFORMS: dict[str, tuple] = {
    "np.log": (np.log, *_LOG), "log": (np.log, *_LOG), "np.log2": (np.log2, *_LOG),
    "log2": (np.log2, *_LOG), "np.log10": (np.log10, *_LOG), "log10": (np.log10, *_LOG),
    "np.sqrt": _SQRT, "sqrt": _SQRT, "np.exp": _EXP, "exp": _EXP,
    "scale": (None, "scale() of a constant column divides by a zero SD", "or leave it unscaled"),
    "center": (None, "", "")}
_FUNCTIONS = {n for n in TRANSFORMS if "." not in n} | {"C", "I", "Q", "Treatment"}
_ARITH = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "**": np.power}
_AST_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}


def _closed_namespace() -> dict:
    from patsy.builtins import C, I, Q, Treatment, center, standardize

    return {"np": _NP, "log": np.log, "log2": np.log2, "log10": np.log10, "sqrt": np.sqrt,
            "exp": np.exp, "scale": standardize, "center": center, "C": C, "I": I, "Q": Q,
            "Treatment": Treatment}


#: Every name the generated code may use besides data columns (patsy's stateful
#: ``scale``/``center``, ``C``, ``Treatment``, ``I``, ``Q`` and the numpy transforms).
CLOSED_NAMESPACE = _closed_namespace()


class ClosedEnvironment(patsy.EvalEnvironment):
    """patsy's evaluation environment limited to :data:`CLOSED_NAMESPACE`: no Python
    builtins (``__import__``, ``open``, ``eval`` ...), no patsy extras (splines, other
    contrasts), no private attributes (``C.__globals__`` holds the builtins). Only code
    written by :class:`ParsedFormula` (and patsy's own ``.transform`` calls) runs in it."""

    def with_outer_namespace(self, outer_namespace):
        return self  # patsy would add its builtins; the closed list already has ours

    def subset(self, names):
        vld = VarLookupDict(self._namespaces)
        return ClosedEnvironment([{n: vld[n] for n in names}], self.flags)

    def eval(self, expr, source_name="<string>", inner_namespace={}):  # noqa: B006 (patsy's)
        tree = ast.parse(expr.strip(), mode="eval")
        if any(isinstance(n, ast.Attribute) and n.attr.startswith("_") for n in ast.walk(tree)):
            raise patsy.PatsyError(f"refused to evaluate {expr!r}: private attributes")
        code = compile(tree, source_name, "eval", self.flags, False)
        return eval(code, {"__builtins__": {}},  # noqa: S307 - code written by this module
                    VarLookupDict([inner_namespace] + self._namespaces))


def closed_environment() -> ClosedEnvironment:
    """A fresh :class:`ClosedEnvironment` (pass it to patsy as ``eval_env``)."""
    return ClosedEnvironment([dict(CLOSED_NAMESPACE)])


def _quote(text: str, prefer: str = "") -> str:
    """``text`` as a string literal, in the ``prefer``-red quote when it can (patsy's
    names keep the user's spelling); refused when no plain literal holds it."""
    if re.search(r"[\\\x00-\x1f\x7f]", text) or {"'", '"'} <= set(text):
        raise FormulaError(MSG_UNQUOTABLE.format(name=text))
    q = prefer if prefer and prefer not in text else '"' if '"' not in text else "'"
    return f"{q}{text}{q}"


def _uniq(items: Iterable) -> tuple:
    return tuple(dict.fromkeys(items))


# --------------------------------------------------------------------------- the tree

@dataclass(frozen=True)
class Column:
    """A data column named in the formula (``quote``: the quote of ``Q("...")``, or "")."""

    name: str
    quote: str = ""

    @property
    def code(self) -> str:
        bare = re.fullmatch(r"[A-Za-z_]\w*", self.name, re.ASCII) and not self.quote
        if bare and not keyword.iskeyword(self.name) and self.name not in CLOSED_NAMESPACE \
                and not self.name.startswith("__"):
            return self.name
        return f"Q({_quote(self.name, self.quote)})"

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.name,)

    def values(self, frame) -> np.ndarray:
        import pandas as pd

        return pd.to_numeric(frame[self.name], errors="coerce").to_numpy(dtype=float)


@dataclass(frozen=True)
class Arith:
    """``column op number`` (inside ``I()`` or a transform)."""

    column: Column
    op: str
    number: str

    @property
    def code(self) -> str:
        return f"{self.column.code} {self.op} {self.number}"

    @property
    def columns(self) -> tuple[str, ...]:
        return self.column.columns

    def values(self, frame) -> np.ndarray:
        return _ARITH[self.op](self.column.values(frame), float(self.number))


@dataclass(frozen=True)
class Factor:
    """One factor of a term: a column, ``C(column ...)``, ``I(arith)`` or ``f(arg)``."""

    kind: str                       # column | categorical | identity | transform
    arg: Column | Arith
    function: str = ""              # transform name as written (np.log, log, scale ...)
    reference: str | float | None = None   # C(col, Treatment(reference)); None: default
    reference_code: str = ""        # the reference as written back: "'venous'", "reference='v'"

    @property
    def code(self) -> str:
        """patsy code of this factor in patsy's own spacing (so term names stay patsy's)."""
        arg = self.arg.code
        ref = f", Treatment({self.reference_code})" if self.reference_code else ""
        return {"column": arg, "categorical": f"C({arg}{ref})", "identity": f"I({arg})"}.get(
            self.kind, f"{self.function}({arg})")

    @property
    def columns(self) -> tuple[str, ...]:
        return self.arg.columns

    @property
    def numeric(self) -> bool:
        return self.kind != "categorical"

    def values(self, frame) -> np.ndarray:
        """This factor's values on ``frame`` (numeric factors; a plain column as given),
        computed with numpy from the tree, never by evaluating text."""
        x = self.arg.values(frame)
        if self.kind != "transform":
            return x
        if (func := TRANSFORMS[self.function][0]) is not None:
            return func(x)
        centred = x - np.mean(x)
        return centred if self.function == "center" else centred / np.std(centred)

    def why_not_finite(self) -> tuple[str, str]:
        """(reason, extra fix) for a non-finite value of this factor."""
        if self.kind == "transform":
            _, why, fix = TRANSFORMS[self.function]
            return why, fix.format(f=self.function, col=self.arg.code)
        if self.kind == "identity":
            return "the arithmetic gives an infinite or undefined value", ""
        return "the column holds infinite values", ""


@dataclass(frozen=True)
class Term:
    """An interaction of factors (one factor: a main effect); equal as sets, as patsy."""

    factors: tuple[Factor, ...]

    def __eq__(self, other) -> bool:
        return isinstance(other, Term) and frozenset(self.factors) == frozenset(other.factors)

    def __hash__(self) -> int:
        return hash(frozenset(self.factors))

    @property
    def name(self) -> str:
        """patsy's term name (``phase:sex``, ``np.log(tumor_size_mm)``)."""
        return ":".join(f.code for f in self.factors)

    @property
    def columns(self) -> tuple[str, ...]:
        return _uniq(c for f in self.factors for c in f.columns)


def _interact(left, right) -> tuple[Term, ...]:
    return _uniq(Term(_uniq(a.factors + b.factors)) for a in left for b in right)


@dataclass(frozen=True)
class ParsedFormula:
    """A formula read by :func:`parse_formula`.

    ``terms`` are the fixed-effect terms, expanded as patsy expands them (``a*b`` ->
    ``a``, ``b``, ``a:b``; duplicates dropped), without the intercept; ``intercept`` says
    whether the model has one; ``random_group`` is the column of ``(1 | group)``;
    ``random_nested`` the inner column of ``(1 | group/inner)`` (lme4's nested
    intercepts, ``(1 | group) + (1 | inner:group)``).
    """

    text: str
    response: Column | None
    terms: tuple[Term, ...]
    intercept: bool = True
    random_group: Column | None = None
    random_nested: Column | None = None

    def rhs_columns(self) -> list[str]:
        """The source data columns of the right-hand side's fixed-effect terms, in order
        of first use (``np.log(tumor_size_mm)`` -> ``tumor_size_mm``)."""
        return list(_uniq(c for t in self.terms for c in t.columns))

    def columns(self) -> list[str]:
        """Every column the formula names: response, right-hand side, random group."""
        return list(_uniq([c.name for c in (self.response,) if c] + self.rhs_columns()
                          + [c.name for c in (self.random_group, self.random_nested) if c]))

    def term_names(self) -> list[str]:
        """patsy's names of the fixed-effect terms (``Intercept`` not included)."""
        return [t.name for t in self.terms]

    def categorical_columns(self) -> list[str]:
        """Columns used through ``C(...)``: factors whatever their dtype."""
        return list(_uniq(f.arg.name for t in self.terms for f in t.factors
                          if f.kind == "categorical"))

    def references(self) -> dict[str, str | float]:
        """``{column: reference level}`` set with ``Treatment(...)``."""
        return {f.arg.name: f.reference for t in self.terms for f in t.factors
                if f.kind == "categorical" and f.reference is not None}

    def numeric_factors(self) -> list[Factor]:
        return list(_uniq(f for t in self.terms for f in t.factors if f.numeric))

    @property
    def patsy_rhs(self) -> str:
        """patsy code of the fixed-effect right-hand side, written from the tree."""
        rhs = " + ".join(t.name for t in self.terms) or "1"
        return rhs if self.intercept else f"{rhs} - 1"

    @property
    def formula(self) -> str:
        """The fixed-effect formula, canonical (``detected ~ phase + sex``)."""
        return f"{self.response.code + ' ' if self.response else ''}~ {self.patsy_rhs}"

    def __str__(self) -> str:
        inner = f"/{self.random_nested.code}" if self.random_nested else ""
        return self.formula + (f" + (1 | {self.random_group.code}{inner})"
                               if self.random_group else "")

    def with_response(self, name: str) -> ParsedFormula:
        return replace(self, response=Column(name))

    def fixed_only(self) -> ParsedFormula:
        """The formula without its random intercept."""
        return replace(self, random_group=None, random_nested=None)

    def with_columns(self, *names: str) -> ParsedFormula:
        """The formula with main-effect terms for ``names`` appended (kept once)."""
        new = tuple(Term((Factor("column", Column(n)),)) for n in names)
        return replace(self, terms=_uniq(self.terms + new))

    def without(self, variables: Iterable[str]) -> tuple[ParsedFormula, list[str]]:
        """Drop every term using one of ``variables`` (a column, a factor such as
        ``np.log(tumor_size_mm)``, or a term name); return the reduced formula and the
        dropped terms' names."""
        wanted = {v.replace(" ", "") for v in variables}

        def hit(t: Term) -> bool:
            names = set(t.columns) | {f.code.replace(" ", "") for f in t.factors}
            return bool(names & wanted) or t.name.replace(" ", "") in wanted

        dropped = [t.name for t in self.terms if hit(t)]
        return replace(self, terms=tuple(t for t in self.terms if not hit(t))), dropped

    def check_columns(self, columns: Iterable, *, source: str = "data",
                      include_response: bool = False) -> None:
        """Raise :class:`FormulaError` naming the columns the data lacks (the response
        only with ``include_response``: ``detected``/``correct`` are derived)."""
        present = [str(c) for c in columns]
        names = ([self.response.name] if include_response and self.response else [])
        names += self.rhs_columns() + [c.name for c in (self.random_group, self.random_nested)
                                       if c]
        missing = [c for c in _uniq(names) if c not in set(present)]
        if not missing:
            return
        close = {m: difflib.get_close_matches(m, present, n=1) for m in missing}
        hint = "; ".join(f"did you mean {c[0]!r} for {m!r}?" for m, c in close.items() if c)
        shown = ", ".join(present[:40]) + (", ..." if len(present) > 40 else "")
        raise FormulaError(MSG_UNKNOWN_COLUMNS.format(
            source=source, formula=self.text, columns=missing, present=shown,
            hint=f" ({hint})" if hint else ""), column=missing[0])


class FormulaError(ContractError):
    """A formula outside the allowlist, or naming columns the data lacks."""


# --------------------------------------------------------------------------- reading

_LEX = re.compile(r"""(?P<space>[ \t\r\n]+)|(?P<string>(['"])(?P<body>.*?)\3|['"])
    |(?P<name>[A-Za-z_]\w*)|(?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?[\w.]*)
    |(?P<op>\*\*|:=|[~+\-*/:(),=|.])""", re.ASCII | re.DOTALL | re.VERBOSE)
_NEXT = re.compile(r"\s*(\(|[A-Za-z_]\w*)?", re.ASCII)
_RANDOM_OP = [Operator("|", 2, 50)]    # below '+': '(1 | g)' needs its parentheses


class _Reader:
    def __init__(self, text: str):
        self.text, self.norm = text, re.sub(r"[\t\r\n]", " ", text)  # patsy reads one line
        self.lead = len(self.norm) - len(self.norm.lstrip())   # patsy strips the text
        self.src, self.base = "", 0                            # the factor being matched

    def fail(self, problem: str, pos: int):
        """Raise :data:`MSG_FORMULA` for ``pos``, with the top-level term (between + and ~)
        that holds it."""
        depth, quote, cuts = 0, "", [-1]
        for i, ch in enumerate(self.text):
            if quote or ch in "'\"":
                quote = "" if ch == quote else quote or ch
            elif ch in "([{)]}":
                depth += 1 if ch in "([{" else -1
            elif ch in "+~" and depth <= 0:
                cuts.append(i)
        lo = max(c for c in cuts if c < pos) + 1
        term = self.text[lo:min([c for c in cuts if c >= pos] + [len(self.text)])].strip()
        term = term or self.text.partition("~")[2].strip() or self.text
        raise FormulaError(MSG_FORMULA.format(formula=self.text, problem=problem, pos=pos + 1,
                                              term=term if len(term) <= 80 else term[:77] + "..."))

    # ---------------------------------------------------------------- 1. characters
    def scan(self) -> None:
        text, i, depth, tildes, prev = self.norm, 0, 0, 0, None
        while i < len(text):
            m = _LEX.match(text, i)
            if m is None:
                ch = text[i]
                why = _HINTS.get(ch, "" if ch.isascii() else _QUOTE_HINT)
                self.fail(P_CHAR.format(char=ch, code=ord(ch), why=why), i)
            kind, tok, after = m.lastgroup, m.group(), _NEXT.match(text, m.end()).group(1)
            if kind == "string":
                bad = re.search(r"[\\\x00-\x1f\x7f]", m.group("body") or "")
                if len(tok) == 1:
                    self.fail(P_UNTERMINATED, i)
                if prev and prev.lastgroup == "string":   # Python would join 'a' 'b'
                    self.fail(P_EXPECTED.format(what="')'", found="more quoted text"), i)
                if prev and prev.lastgroup == "name" and prev.end() == i:
                    self.fail(P_PREFIX.format(name=prev.group()), prev.start())
                if bad:
                    self.fail(P_QUOTE_CHAR, i + 1 + bad.start())
            elif kind == "name":
                np_name = prev is not None and prev.group() == "."   # checked at the '.'
                for problem, hit in ((P_KEYWORD, keyword.iskeyword(tok)),
                                     (P_UNKNOWN_FUNCTION, after == "(" and tok not in _FUNCTIONS
                                      and not np_name), (P_DUNDER, tok.startswith("__"))):
                    if hit:
                        self.fail(problem.format(name=tok), i)
            elif kind == "number" and (not re.fullmatch(r"(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", tok)
                                       or len(tok) > 32 or not np.isfinite(float(tok))):
                self.fail(P_BAD_NUMBER.format(text=tok), i)
            elif tok == "." and (prev is None or prev.group() != "np"):
                name = f"{prev.group()}." if prev and prev.lastgroup == "name" else f".{after}"
                self.fail(P_ATTRIBUTE.format(name=name), i)
            elif tok == "." and f"np.{after}" not in TRANSFORMS:
                self.fail(P_NP_FUNCTION.format(name=f"np.{after or ''}"), prev.start())
            elif tok == ":=":
                self.fail(P_ASSIGN, i)
            depth += (tok == "(") - (tok == ")")
            tildes += tok == "~"
            if depth > MAX_DEPTH or tildes > 1:
                self.fail(P_DEPTH if depth > MAX_DEPTH else P_SECOND_TILDE, i)
            prev, i = (m if kind != "space" else prev), m.end()
        if not tildes:
            raise FormulaError(MSG_NO_TILDE.format(formula=self.text))

    # ---------------------------------------------------------------- 2. operators
    def formula(self) -> ParsedFormula:
        self.scan()
        try:
            tree = _patsy_parse(self.norm, extra_operators=_RANDOM_OP)
        except patsy.PatsyError as exc:
            problem = exc.message.replace("a noun", "a term").replace(", not '", ", found '")
            problem = problem.replace("but instead the expression ended", "found the end of the formula")
            self.fail(problem, self.lead + (exc.origin.start if exc.origin else 0))
        response = None
        if len(tree.args) == 2:
            response = self.column(self.expr(tree.args[0], "the outcome column before '~'"),
                                   "the outcome column before '~'")
        terms, intercept, group, nested = self.sum(tree.args[-1])
        if not terms and not intercept:
            raise FormulaError(MSG_NO_TERMS.format(formula=self.text))
        return ParsedFormula(self.text, response, terms, intercept, group, nested)

    def pos(self, node) -> int:
        return self.lead + node.token.origin.start

    def limit(self, terms: tuple) -> tuple:
        if len(terms) > MAX_TERMS:
            raise FormulaError(MSG_TOO_MANY_TERMS.format(formula=self.text, n=len(terms),
                                                         limit=MAX_TERMS))
        return terms

    def sum(self, node):
        """The top-level sum: its terms, the intercept, the random group and the nested
        inner group (None without one)."""
        items = []
        while node.type in ("+", "-") and len(node.args) == 2:
            items.append((node.type, node.args[1]))
            node = node.args[0]
        terms, intercept, group, nested = (), True, None, None
        for sign, item in reversed(items + [("+", node)]):
            if item.type in ("+", "-") and len(item.args) == 1 and sign == "+":
                sign, item = item.type, item.args[0]
            if item.type == "ONE" or item.type == "ZERO" and sign == "+":
                intercept = (item.type == "ONE") == (sign == "+")
            elif sign == "-":
                self.fail(P_MINUS, self.pos(item))
            elif item.type == "|":
                if group is not None or item.args[0].type != "ONE":
                    self.fail(P_RANDOM, self.pos(item))
                g = item.args[1]
                if g.type == "/" and len(g.args) == 2:    # (1 | site/patient_id)
                    nested = self.column(self.expr(g.args[1], P_RANDOM), "the inner group column")
                    g = g.args[0]
                group = self.column(self.expr(g, P_RANDOM), "the group column")
                if nested is not None and nested.name == group.name:
                    self.fail(P_RANDOM, self.pos(item))
            else:
                terms = self.limit(_uniq(terms + self.expand(item)))
        return terms, intercept, group, nested

    def expand(self, node) -> tuple[Term, ...]:
        """The terms of ``node``; a chain (``a:b:...``) is walked, not recursed into."""
        while node.type == "+" and len(node.args) == 1:
            node = node.args[0]
        op = node.type
        if op == "PYTHON_EXPR":
            return (Term((self.factor(self.expr(node)),)),)
        if op not in ("+", "*", ":") or len(node.args) != 2:
            number = op == "NUMBER" and P_NUMBER_TERM.format(text=node.token.extra)
            self.fail(P_NODE.get(op) or number or P_EXPECTED.format(
                what="a term", found=repr(node.origin.relevant_code())), self.pos(node))
        parts = []
        while node.type == op and len(node.args) == 2:
            parts.append(node.args[1])
            node = node.args[0]
        out = self.expand(node)
        for part in reversed(parts):
            right = self.expand(part)
            out = self.limit(_uniq(out + right) if op == "+" else _interact(out, right)
                             if op == ":" else _uniq(out + right + _interact(out, right)))
        return out

    # ---------------------------------------------------------------- 3. factors
    def expr(self, node, what: str = "a term") -> ast.expr:
        """The ``ast`` of a factor's text (parsed, not evaluated)."""
        if node.type != "PYTHON_EXPR":
            self.fail(P_RANDOM if what == P_RANDOM else P_EXPECTED.format(
                what=what, found=repr(node.origin.relevant_code())), self.pos(node))
        start = self.lead + node.origin.start
        self.src, self.base = self.norm[start:self.lead + node.origin.end], start
        try:
            return ast.parse(self.src, mode="eval").body
        except SyntaxError as exc:
            self.fail(P_SYNTAX.format(found=repr(self.src), why=exc.msg),
                      start + max((exc.offset or 1) - 1, 0))

    def at(self, e: ast.AST) -> int:
        """Position of ``e`` in the formula (``col_offset`` counts UTF-8 bytes)."""
        return self.base + len(self.src.encode()[:e.col_offset].decode(errors="ignore"))

    def found(self, e: ast.AST) -> str:
        if isinstance(e, ast.Call):
            return ast.get_source_segment(self.src, e.func) + "(...)"
        return "quoted text" if isinstance(e, ast.Constant) and isinstance(e.value, str) else \
            repr(ast.get_source_segment(self.src, e))

    def column(self, e: ast.expr, what: str = "a column") -> Column:
        match e:
            case ast.Name(id=name):
                return Column(name)
            case ast.Call(func=ast.Name(id="Q"), args=[ast.Constant(value=str(name)) as s],
                          keywords=[]):
                return Column(name, quote=self.src[self.at(s) - self.base])
            case ast.Call(func=ast.Name(id="Q")):
                self.fail(P_ARGUMENTS.format(name="Q", takes=_TAKES["Q"]),
                          self.at((e.args + [e])[0]))
            case ast.Constant(value=str()):
                self.fail(P_STRING, self.at(e))
        self.fail(P_EXPECTED.format(what=what, found=self.found(e)), self.at(e))

    def number(self, e: ast.expr) -> str:
        neg = isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub)
        c = e.operand if neg else e
        if not (isinstance(c, ast.Constant) and type(c.value) in (int, float)):
            self.fail(P_EXPECTED.format(what="a number", found=self.found(e)), self.at(e))
        return "-" * neg + ast.get_source_segment(self.src, c)

    def factor(self, e: ast.expr) -> Factor:
        f = e.func if isinstance(e, ast.Call) else None
        np_attr = isinstance(f, ast.Attribute) and getattr(f.value, "id", "") == "np"
        name = f.id if isinstance(f, ast.Name) else f"np.{f.attr}" if np_attr else ""
        if name not in ("C", "I") and name not in TRANSFORMS:
            return Factor("column", self.column(e, "a term" if name else "a column"))
        extra = e.args[1:] + e.keywords
        takes = P_ARGUMENTS.format(name=name,
                                   takes=_TAKES.get(name, "a column or 'column op number'"))
        if name != "C":
            if extra or not e.args:
                self.fail(takes, self.at((extra + [e])[0]))
            arg = e.args[0]
            if isinstance(arg, ast.BinOp) and type(arg.op) in _AST_OPS:
                arg = Arith(self.column(arg.left), _AST_OPS[type(arg.op)], self.number(arg.right))
            elif name == "I":
                self.fail(takes, self.at(arg))
            else:
                arg = self.column(arg)
            return Factor("identity", arg) if name == "I" else Factor("transform", arg, name)
        match e.args:
            case [col] if not e.keywords:
                return Factor("categorical", self.column(col))
            case [_, _, wrong, *_]:
                self.fail(P_EXPECTED.format(what="')' closing C(", found=self.found(wrong)),
                          self.at(wrong))
            case [col, ast.Call(func=ast.Name(id="Treatment"), args=[level], keywords=[])] \
                    if not e.keywords:
                kw = ""
            case [col, ast.Call(func=ast.Name(id="Treatment"), args=[], keywords=[
                    ast.keyword(arg="reference", value=level)])] if not e.keywords:
                kw = "reference="
            case _:
                self.fail(takes, self.at((extra + [e])[0]))
        col = self.column(col)
        if isinstance(level, ast.Constant) and isinstance(level.value, str):
            ref, code = level.value, _quote(level.value, self.src[self.at(level) - self.base])
        else:
            code = self.number(level)
            ref = int(code) if re.fullmatch(r"-?\d+", code) else float(code)
        return Factor("categorical", col, reference=ref, reference_code=kw + code)


def parse_formula(text: str, columns: Iterable | None = None) -> ParsedFormula:
    """Parse a model formula (module docstring); nothing is evaluated.

    Parameters
    ----------
    text : str
        e.g. ``"detected ~ phase + age_group + sex + race + np.log(tumor_size_mm)"``;
        one-sided (``"~ phase"``) is allowed; ``+ (1 | site)`` names the random group.
    columns : iterable of str, optional
        The data's columns: every column of the right-hand side and the random group
        must be among them (the outcome is not checked: ``detected``/``correct`` are
        derived from ``label`` and ``pred``).

    Returns
    -------
    ParsedFormula
        ``.rhs_columns()``, ``.terms``, ``.intercept``, ``.random_group``,
        ``.patsy_rhs`` (the code patsy evaluates, written from the tree).

    Raises
    ------
    FormulaError
        Text outside the allowlist (the message names the term, the character position
        and what is allowed), or columns the data lacks (named, with the data's columns).
    """
    if not isinstance(text, str):
        raise FormulaError(MSG_NOT_TEXT.format(got=text))
    if len(text) > MAX_LENGTH:
        raise FormulaError(MSG_TOO_LONG.format(n=len(text), limit=MAX_LENGTH))
    parsed = _Reader(text).formula()
    if columns is not None:
        parsed.check_columns(columns)
    return parsed
