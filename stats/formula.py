"""clinrel's own model-formula grammar: user text is parsed here, never evaluated.

A formula in ``plan.yaml`` or ``clinrel adjust --formula`` is data. This module reads it
with a small tokenizer and recursive-descent parser (no ``eval``, no ``ast``, no patsy on
the user's text) into a :class:`ParsedFormula`; the design matrix is then built from code
that :class:`ParsedFormula` writes itself, from known names only, and patsy evaluates that
code in :data:`CLOSED_ENVIRONMENT` (the closed function list, no Python builtins).

Grammar (R / patsy habits)::

    formula   := [column] "~" sum
    sum       := item (("+" | "-") item)*          item: a product, 1, 0 (or -1), (1 | group)
    product   := inter ("*" inter)*                a*b = a + b + a:b
    inter     := atom (":" atom)*                  a:b = the interaction
    atom      := "(" sum ")" | factor
    factor    := column
               | C(column) | C(column, Treatment(level)) | C(column, Treatment(reference=level))
               | f(column) | f(column op number)   f: np.log log np.log2 log2 np.log10 log10
                                                      np.sqrt sqrt np.exp exp scale center
               | I(column op number)               op: + - * / **
    column    := name | Q("any column name")       name: ASCII letters, digits, _
    level     := "text" | 'text' | number

Column names that are not plain ASCII identifiers (spaces, dots, accents, a Python
keyword) are quoted as patsy does: ``Q("tumor size")``, ``Q('age.group')`` (no
backslashes inside quotes). ``1`` / ``+ 1`` keeps the intercept, ``0`` / ``+ 0`` / ``- 1``
removes it, and ``(1 | site)`` (at most once, at the top level) is lme4's random intercept.
Anything else -- other functions, attribute access (``os.system``, ``np.random``),
subscripts, lambdas, comprehensions, keywords, string literals outside ``Q()`` and
``Treatment()``, f-strings, ``:=``, numbers where a term is expected, ``-`` other than
``- 1``, ``/`` nesting, ``^`` -- raises :class:`FormulaError` (a
:class:`stats.schema.ContractError`: the CLI exits 2) naming the term and the character
position and listing what is allowed.

Term names stay patsy's (``phase[T.delayed]``, ``np.log(tumor_size_mm)``,
``C(phase, Treatment('venous'))[T.arterial]``): the generated code is patsy's own
spacing of the user's factor, so estimates and names equal a direct patsy fit of the same
valid formula (tested in tests/test_safety_formula.py).
"""
from __future__ import annotations

import difflib
import keyword
import re
import types
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

import numpy as np
import patsy
from patsy.eval import VarLookupDict

from stats.schema import ContractError

__all__ = ["FormulaError", "ParsedFormula", "parse_formula", "ALLOWED", "CLOSED_NAMESPACE",
           "ClosedEnvironment", "closed_environment"]

MAX_LENGTH = 4000        # characters of formula text
MAX_TERMS = 256          # fixed-effect terms after expanding '*'
MAX_DEPTH = 16           # nested parentheses

ALLOWED = ("allowed: column names (plain ASCII names, or Q(\"odd name\") for names with "
           "spaces or symbols); + : * and ( ); 1, 0 or -1 for the intercept; (1 | group) once; "
           "C(col), C(col, Treatment('level')), C(col, Treatment(reference='level')); "
           "np.log, log, np.log2, log2, np.log10, log10, np.sqrt, sqrt, np.exp, exp, scale, "
           "center of a column or of 'column op number'; I(column op number) with op one of "
           "+ - * / **")
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
P_BAD_NUMBER = "malformed number {text!r}"
P_INTERCEPT_INSIDE = "the intercept (1, 0, -1) may appear only at the top level, not {where}"
P_MINUS = "'-' may only remove the intercept ('- 1'); leave a term out instead of subtracting it"
P_EXPECTED = "expected {what}, found {found}"
P_RANDOM = "only a random intercept '(1 | group)' is supported, once, at the top level"
P_ARGUMENTS = "{name}() takes {takes}"
P_SECOND_TILDE = "a second '~'"

_HINTS = {
    "[": " (subscripts are not allowed)", "]": "", "{": "", "}": "",
    "`": " (backquoted names are not supported: quote odd column names as Q(\"name\"))",
    "^": " ('^' is not supported: write the interactions out, e.g. (a + b)*c)",
    "#": " (comments are not allowed)", ";": "", "@": "", "%": "", "!": "", "<": "", ">": "",
    "&": "", "$": "", "?": "", "\\": "",
}

# --------------------------------------------------------------------------- names

_NP = types.SimpleNamespace(log=np.log, log2=np.log2, log10=np.log10, sqrt=np.sqrt, exp=np.exp)
#: elementwise transforms: name as written -> (numpy function, what breaks, the fix)
_LOG_FIX = ("the log of zero or a negative value is not finite",
            "or shift the values, e.g. {f}({col} + 1)")
TRANSFORMS: dict[str, tuple] = {
    "np.log": (np.log, *_LOG_FIX), "log": (np.log, *_LOG_FIX),
    "np.log2": (np.log2, *_LOG_FIX), "log2": (np.log2, *_LOG_FIX),
    "np.log10": (np.log10, *_LOG_FIX), "log10": (np.log10, *_LOG_FIX),
    "np.sqrt": (np.sqrt, "the square root of a negative value is not defined", ""),
    "sqrt": (np.sqrt, "the square root of a negative value is not defined", ""),
    "np.exp": (np.exp, "exp overflows for values above 709", "or rescale, e.g. I(col / 100)"),
    "exp": (np.exp, "exp overflows for values above 709", "or rescale, e.g. I(col / 100)"),
    "scale": (None, "scale() of a constant column divides by a zero SD", "or leave it unscaled"),
    "center": (None, "", ""),
}
_ARITH = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "**": np.power}


def _closed_namespace() -> dict:
    from patsy.builtins import C, I, Q, Treatment, center, standardize

    return {"np": _NP, "log": np.log, "log2": np.log2, "log10": np.log10, "sqrt": np.sqrt,
            "exp": np.exp, "scale": standardize, "center": center, "C": C, "I": I, "Q": Q,
            "Treatment": Treatment}


#: Every name the generated code may use besides data columns (patsy's stateful
#: ``scale``/``center``, ``C``, ``Treatment``, ``I``, ``Q`` and the numpy transforms).
CLOSED_NAMESPACE = _closed_namespace()
_RESERVED = set(CLOSED_NAMESPACE) | {"np"}
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class ClosedEnvironment(patsy.EvalEnvironment):
    """patsy's evaluation environment limited to :data:`CLOSED_NAMESPACE`: no Python
    builtins (``__import__``, ``open``, ``eval`` ...), no patsy extras (splines, other
    contrasts). Only code written by :class:`ParsedFormula` is evaluated in it."""

    def with_outer_namespace(self, outer_namespace):
        return self  # patsy would add its builtins; the closed list already has ours

    def subset(self, names):
        vld = VarLookupDict(self._namespaces)
        return ClosedEnvironment([{n: vld[n] for n in names}], self.flags)

    def eval(self, expr, source_name="<string>", inner_namespace={}):  # noqa: B006 (patsy's)
        code = compile(expr, source_name, "eval", self.flags, False)
        return eval(code, {"__builtins__": {}},  # noqa: S307 - code written by this module
                    VarLookupDict([inner_namespace] + self._namespaces))


def closed_environment() -> ClosedEnvironment:
    """A fresh :class:`ClosedEnvironment` (pass it to patsy as ``eval_env``)."""
    return ClosedEnvironment([dict(CLOSED_NAMESPACE)])


def _quote(text: str, prefer: str = "") -> str:
    """``text`` as a Python string literal (it holds no backslash or control character):
    in the ``prefer``-red quote when it can, so patsy's names keep the user's spelling."""
    q = prefer if prefer and prefer not in text else '"' if '"' not in text else "'"
    return f"{q}{text}{q}"


# --------------------------------------------------------------------------- the tree

@dataclass(frozen=True)
class Column:
    """A data column named in the formula (``quote``: the quote of ``Q("...")``, or "")."""

    name: str
    quote: str = ""

    @property
    def code(self) -> str:
        if not self.quote and _BARE.match(self.name) and not keyword.iskeyword(self.name) \
                and self.name not in _RESERVED and not self.name.startswith("__"):
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
        if self.kind == "column":
            return self.arg.code
        if self.kind == "categorical":
            extra = f", Treatment({self.reference_code})" if self.reference_code else ""
            return f"C({self.arg.code}{extra})"
        if self.kind == "identity":
            return f"I({self.arg.code})"
        return f"{self.function}({self.arg.code})"

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
        func = TRANSFORMS[self.function][0]
        if func is not None:
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
        return tuple(dict.fromkeys(c for f in self.factors for c in f.columns))


def _uniq(items: Iterable) -> tuple:
    return tuple(dict.fromkeys(items))


def _interact(left: Sequence[Term], right: Sequence[Term]) -> tuple[Term, ...]:
    return _uniq(Term(_uniq(a.factors + b.factors)) for a in left for b in right)


@dataclass(frozen=True)
class ParsedFormula:
    """A formula read by :func:`parse_formula`.

    ``terms`` are the fixed-effect terms, expanded as patsy expands them (``a*b`` ->
    ``a``, ``b``, ``a:b``; duplicates dropped), without the intercept; ``intercept`` says
    whether the model has one; ``random_group`` is the column of ``(1 | group)``.
    """

    text: str
    response: Column | None
    terms: tuple[Term, ...]
    intercept: bool = True
    random_group: Column | None = None

    # ------------------------------------------------------------- what it names
    def rhs_columns(self) -> list[str]:
        """The source data columns of the right-hand side's fixed-effect terms, in order
        of first use (``np.log(tumor_size_mm)`` -> ``tumor_size_mm``)."""
        return list(_uniq(c for t in self.terms for c in t.columns))

    def term_columns(self) -> list[tuple[str, ...]]:
        """Per fixed-effect term, its source columns."""
        return [t.columns for t in self.terms]

    def columns(self) -> list[str]:
        """Every column the formula names: response, right-hand side, random group."""
        out = [self.response.name] if self.response else []
        out += self.rhs_columns()
        out += [self.random_group.name] if self.random_group else []
        return list(_uniq(out))

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

    # ------------------------------------------------------------- generated code
    @property
    def patsy_rhs(self) -> str:
        """patsy code of the fixed-effect right-hand side, written from the tree."""
        rhs = " + ".join(t.name for t in self.terms) or "1"
        return rhs if self.intercept else f"{rhs} - 1"

    @property
    def formula(self) -> str:
        """The fixed-effect formula, canonical (``detected ~ phase + sex``)."""
        lhs = self.response.code + " " if self.response else ""
        return f"{lhs}~ {self.patsy_rhs}"

    def __str__(self) -> str:
        rand = f" + (1 | {self.random_group.code})" if self.random_group else ""
        return self.formula + rand

    # ------------------------------------------------------------- new formulas
    def with_response(self, name: str) -> ParsedFormula:
        return replace(self, response=Column(name))

    def fixed_only(self) -> ParsedFormula:
        """The formula without its random intercept."""
        return replace(self, random_group=None)

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
        names += self.rhs_columns() + ([self.random_group.name] if self.random_group else [])
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
    """A formula outside clinrel's grammar, or naming columns the data lacks."""


# --------------------------------------------------------------------------- tokens

_NUMBER = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPS = ("**", ":=", "~", "+", "-", "*", "/", ":", "(", ")", ",", "=", "|", ".")


@dataclass(frozen=True)
class _Tok:
    kind: str      # name | number | string | op | end
    text: str
    pos: int       # 0-based offset in the formula
    end: int


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.term_start = 0
        self.tokens = self._tokenize()
        self.i = 0
        self.depth = 0

    # ---------------------------------------------------------------- errors
    def fail(self, problem: str, pos: int):
        raise FormulaError(MSG_FORMULA.format(formula=self.text, problem=problem,
                                              term=self._term_text(), pos=pos + 1))

    def _term_text(self) -> str:
        """The user's text of the top-level term being read (up to the next + or ~)."""
        depth, quote, out = 0, "", []
        for ch in self.text[self.term_start:]:
            if quote:
                quote = "" if ch == quote else quote
            elif ch in "'\"":
                quote = ch
            elif ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            elif ch in "+~" and depth <= 0 and out:
                break
            out.append(ch)
        term = "".join(out).strip() or self.text.partition("~")[2].strip() or self.text
        return term if len(term) <= 80 else term[:77] + "..."

    # ---------------------------------------------------------------- tokenizer
    def _tokenize(self) -> list[_Tok]:
        text, i, out = self.text, 0, []
        while i < len(text):
            ch = text[i]
            if ch in " \t\r\n":
                i += 1
                continue
            if not out or (out[-1].kind == "op" and out[-1].text in ("+", "~")):
                self.term_start = i
            if ch in "'\"":
                end = text.find(ch, i + 1)
                if end < 0:
                    self.fail(P_UNTERMINATED, i)
                body = text[i + 1:end]
                bad = [k for k, c in enumerate(body) if c == "\\" or ord(c) < 32 or ord(c) == 127]
                if bad:
                    self.fail(P_QUOTE_CHAR, i + 1 + bad[0])
                out.append(_Tok("string", body, i, end + 1))
                i = end + 1
                continue
            m = _NAME.match(text, i)
            if m:
                out.append(_Tok("name", m.group(), i, m.end()))
                i = m.end()
                continue
            m = _NUMBER.match(text, i)
            if m:
                end = m.end()
                if end < len(text) and (text[end].isalnum() or text[end] in "_."):
                    while end < len(text) and (text[end].isalnum() or text[end] in "_."):
                        end += 1
                    self.fail(P_BAD_NUMBER.format(text=text[i:end]), i)
                out.append(_Tok("number", m.group(), i, end))
                i = end
                continue
            op = next((o for o in _OPS if text.startswith(o, i)), None)
            if op == ":=":
                self.fail("assignment ':=' is not allowed", i)
            if op is None:
                why = _HINTS.get(ch, "" if ch.isascii() else
                                 " (quote odd column names as Q(\"name\"))")
                self.fail(P_CHAR.format(char=ch, code=ord(ch), why=why), i)
            out.append(_Tok("op", op, i, i + len(op)))
            i += len(op)
        out.append(_Tok("end", "", len(text), len(text)))
        self.term_start = 0
        return out

    # ---------------------------------------------------------------- helpers
    @property
    def tok(self) -> _Tok:
        return self.tokens[self.i]

    def peek(self, k: int = 1) -> _Tok:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def is_op(self, text: str, tok: _Tok | None = None) -> bool:
        t = tok or self.tok
        return t.kind == "op" and t.text == text

    def take(self) -> _Tok:
        t = self.tok
        self.i += 1
        return t

    def expect(self, text: str, what: str) -> _Tok:
        if not self.is_op(text):
            self.fail(P_EXPECTED.format(what=what, found=self._found()), self.tok.pos)
        return self.take()

    def _found(self, tok: _Tok | None = None) -> str:
        t = tok or self.tok
        if t.kind == "end":
            return "the end of the formula"
        if t.kind == "string":
            return "quoted text"
        return repr(t.text)

    # ---------------------------------------------------------------- grammar
    def formula(self) -> ParsedFormula:
        response = None
        if not self.is_op("~"):
            if not any(self.is_op("~", t) for t in self.tokens):
                raise FormulaError(MSG_NO_TILDE.format(formula=self.text))
            response = self.column("the outcome column before '~'")
            if not self.is_op("~"):
                self.fail(P_EXPECTED.format(what="'~' after the outcome column",
                                            found=self._found()), self.tok.pos)
        self.take()
        terms, intercept, group = self.sum(top=True)
        if self.tok.kind != "end":
            what = P_SECOND_TILDE if self.is_op("~") else P_EXPECTED.format(
                what="'+', ':', '*' or the end of the formula", found=self._found())
            if self.is_op("."):
                what = P_ATTRIBUTE.format(name="." + self.peek().text)
            self.fail(what, self.tok.pos)
        if not terms and not intercept:
            raise FormulaError(MSG_NO_TERMS.format(formula=self.text))
        return ParsedFormula(text=self.text, response=response, terms=terms,
                             intercept=intercept, random_group=group)

    def sum(self, *, top: bool):
        terms: tuple[Term, ...] = ()
        intercept, group = True, None
        sign = "+"
        if self.is_op("-") or self.is_op("+"):
            sign = self.take().text
        while True:
            if top:
                self.term_start = self.tok.pos
            t = self.tok
            if t.kind == "number" and t.text in ("0", "1") and (
                    self.peek().kind == "end" or self.peek().text in ("+", "-", ")")):
                if not top:
                    self.fail(P_INTERCEPT_INSIDE.format(where="inside parentheses"), t.pos)
                if sign == "-" and t.text == "0":
                    self.fail(P_MINUS, t.pos)
                self.take()
                intercept = (t.text == "1") == (sign == "+")
            elif sign == "-":
                self.fail(P_MINUS, t.pos)
            elif self._random_ahead():
                if not top or group is not None:
                    self.fail(P_RANDOM, t.pos)
                group = self.random()
            else:
                terms = _uniq(terms + self.product())
                if len(terms) > MAX_TERMS:
                    raise FormulaError(MSG_TOO_MANY_TERMS.format(
                        formula=self.text, n=len(terms), limit=MAX_TERMS))
            if not (self.is_op("+") or self.is_op("-")):
                return terms, intercept, group
            sign = self.take().text

    def _random_ahead(self) -> bool:
        return self.is_op("(") and self.peek().text == "1" and self.is_op("|", self.peek(2))

    def random(self) -> Column:
        self.take()
        self.take()
        self.take()
        group = self.column("the group column of '(1 | group)'")
        if self.is_op("/") or self.is_op(":") or self.is_op("+"):
            self.fail(P_RANDOM, self.tok.pos)
        self.expect(")", "')' closing '(1 | group)'")
        if self.is_op(":") or self.is_op("*"):
            self.fail(P_RANDOM, self.tok.pos)
        return group

    def product(self) -> tuple[Term, ...]:
        left = self.inter()
        while self.is_op("*"):
            self.take()
            right = self.inter()
            left = _uniq(left + right + _interact(left, right))
            if len(left) > MAX_TERMS:
                raise FormulaError(MSG_TOO_MANY_TERMS.format(formula=self.text, n=len(left),
                                                             limit=MAX_TERMS))
        if self.is_op("/"):
            self.fail("'/' (nesting) is not supported; write a + a:b", self.tok.pos)
        if self.is_op("**"):
            self.fail("'**' is allowed only inside I(), e.g. I(age ** 2)", self.tok.pos)
        if self.is_op("|"):
            self.fail(P_RANDOM, self.tok.pos)
        return left

    def inter(self) -> tuple[Term, ...]:
        left = self.atom()
        while self.is_op(":"):
            self.take()
            left = _interact(left, self.atom())
        return left

    def atom(self) -> tuple[Term, ...]:
        t = self.tok
        if self.is_op("("):
            if self._random_ahead():
                self.fail(P_RANDOM, t.pos)
            self.depth += 1
            if self.depth > MAX_DEPTH:
                self.fail(f"more than {MAX_DEPTH} nested parentheses", t.pos)
            self.take()
            if self.is_op("-"):
                self.fail(P_MINUS, self.tok.pos)
            terms, _, _ = self.sum(top=False)
            if self.is_op("|"):
                self.fail(P_RANDOM, self.tok.pos)
            self.expect(")", "')'")
            self.depth -= 1
            return terms
        if t.kind == "number":
            if t.text in ("0", "1"):
                self.fail(P_INTERCEPT_INSIDE.format(where="inside an interaction"), t.pos)
            self.fail(P_NUMBER_TERM.format(text=t.text), t.pos)
        if t.kind == "name":
            return (Term((self.factor(),)),)
        if t.kind == "string":
            self.fail(P_STRING, t.pos)
        self.fail(P_EXPECTED.format(what="a term", found=self._found()), t.pos)

    # ---------------------------------------------------------------- factors
    def _name_checks(self, t: _Tok) -> None:
        nxt = self.peek()
        if nxt.kind == "string" and nxt.pos == t.end:
            self.fail(P_PREFIX.format(name=t.text), t.pos)
        if keyword.iskeyword(t.text):
            self.fail(P_KEYWORD.format(name=t.text), t.pos)
        if t.text.startswith("__"):
            self.fail(P_DUNDER.format(name=t.text), t.pos)

    def factor(self) -> Factor:
        t = self.tok
        name = t.text
        if self.is_op("(", self.peek()) and name not in TRANSFORMS and name not in ("C", "I", "Q"):
            self.fail(P_UNKNOWN_FUNCTION.format(name=name), t.pos)
        self._name_checks(t)
        if name == "Q":
            return Factor("column", self.column("a column"))
        if self.is_op(".", self.peek()):
            after = self.peek(2)
            if name != "np" or after.kind != "name":
                self.fail(P_ATTRIBUTE.format(name=name + "."), self.peek().pos)
            name = f"np.{after.text}"
            if name not in TRANSFORMS:
                self.fail(P_NP_FUNCTION.format(name=name), t.pos)
            self.i += 2
        if not self.is_op("(", self.peek()):
            if name in TRANSFORMS and "." in name:
                self.fail(P_EXPECTED.format(what=f"'(' after {name}", found=self._found(
                    self.peek())), self.peek().pos)
            return Factor("column", self.column("a column"))
        self.take()
        self.take()
        if name == "C":
            return self.categorical()
        if name == "I":
            arg = self.arith("I")
            self.expect(")", "')' closing I(")
            return Factor("identity", arg)
        if name in TRANSFORMS:
            arg = self.arith(name)
            self.expect(")", f"')' closing {name}(")
            return Factor("transform", arg, function=name)
        self.fail(P_UNKNOWN_FUNCTION.format(name=name), t.pos)

    def column(self, what: str) -> Column:
        t = self.tok
        if t.kind != "name":
            self.fail(P_EXPECTED.format(what=what, found=self._found()), t.pos)
        if self.is_op("(", self.peek()) and t.text != "Q":
            self.fail(P_UNKNOWN_FUNCTION.format(name=t.text) if t.text not in TRANSFORMS
                      and t.text not in ("C", "I") else
                      P_EXPECTED.format(what=what, found=f"{t.text}(...)"), t.pos)
        if t.text == "np" and self.is_op(".", self.peek()) and self.peek(2).kind == "name":
            self.fail(P_EXPECTED.format(what=what, found=f"np.{self.peek(2).text}(...)"), t.pos)
        self._name_checks(t)
        if t.text == "Q" and self.is_op("(", self.peek()):
            self.take()
            self.take()
            s = self.tok
            if s.kind != "string":
                self.fail(P_ARGUMENTS.format(name="Q", takes="one quoted column name, "
                                             "e.g. Q(\"tumor size\")"), s.pos)
            self.take()
            self.expect(")", "')' closing Q(")
            return Column(s.text, quote=self.text[s.pos])
        if self.is_op(".", self.peek()):
            self.fail(P_ATTRIBUTE.format(name=t.text + "."), self.peek().pos)
        self.take()
        return Column(t.text)

    def number(self) -> str:
        sign = ""
        if self.is_op("-"):
            sign = self.take().text
        t = self.tok
        if t.kind != "number":
            self.fail(P_EXPECTED.format(what="a number", found=self._found()), t.pos)
        if len(t.text) > 32 or not np.isfinite(float(t.text)):
            self.fail(P_BAD_NUMBER.format(text=t.text), t.pos)
        self.take()
        return sign + t.text

    def arith(self, name: str) -> Column | Arith:
        required = name == "I"
        col = self.column("a column")
        if not required and self.is_op(")"):
            return col
        op = self.tok
        if op.kind != "op" or op.text not in _ARITH:
            self.fail(P_ARGUMENTS.format(
                name=name,
                takes="'column op number', op one of + - * / **" if required else
                "a column or 'column op number'"), op.pos)
        self.take()
        return Arith(col, op.text, self.number())

    def categorical(self) -> Factor:
        col = self.column("a column")
        if self.is_op(")"):
            self.take()
            return Factor("categorical", col)
        self.expect(",", "')' or ', Treatment(level)' in C(")
        t = self.tok
        if t.kind != "name" or t.text != "Treatment" or not self.is_op("(", self.peek()):
            self.fail(P_ARGUMENTS.format(name="C", takes="a column and optionally "
                                         "Treatment('reference level')"), t.pos)
        self.take()
        self.take()
        kw = ""
        if self.tok.kind == "name" and self.tok.text == "reference" and self.is_op("=", self.peek()):
            self.take()
            self.take()
            kw = "reference="
        lit = self.tok
        if lit.kind == "string":
            self.take()
            level, code = lit.text, _quote(lit.text, self.text[lit.pos])
        else:
            code = self.number()
            level = float(code)
            level = int(level) if level.is_integer() and "." not in code and "e" not in code.lower() \
                else level
        self.expect(")", "')' closing Treatment(")
        self.expect(")", "')' closing C(")
        return Factor("categorical", col, reference=level, reference_code=kw + code)


def parse_formula(text: str, columns: Iterable | None = None) -> ParsedFormula:
    """Parse a model formula with clinrel's grammar (module docstring); nothing is evaluated.

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
        Text outside the grammar (the message names the term, the character position
        and what is allowed), or columns the data lacks (named, with the data's columns).
    """
    if not isinstance(text, str):
        raise FormulaError(MSG_NOT_TEXT.format(got=text))
    if len(text) > MAX_LENGTH:
        raise FormulaError(MSG_TOO_LONG.format(n=len(text), limit=MAX_LENGTH))
    parsed = _Parser(text).formula()
    if columns is not None:
        parsed.check_columns(columns)
    return parsed
