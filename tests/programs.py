"""The external programs the tests, their helpers, bench/ and scripts/ run, found by reading
their sources (tests/test_system_packages.py checks that the test command installs each).

Python: every argv given to subprocess's run, Popen, call, check_call and check_output, to
asyncio.create_subprocess_exec and os.exec*, and every name given to shutil.which; their
first word is followed through literals, assignments, `*` unpacking, `or`, `if ... else`,
the functions that return it (in the module, or imported from another scanned one), and
the functions that pass their own parameter on as the command (`run("podman", ...)` of a
`def run(*command)`), to the calls of those. The script a `bash -c` runs is read as shell.
Shell: the first word of each simple command, past assignments, redirections, keywords
and the runners that take a command (nice, env, sudo, exec, ...), with variables set in
the script itself expanded (`for tool in a b`, `SUDO=sudo`, `x=${X:-default}`), and the
names `command -v` asks about. A first word that none of this can tell is reported as
unresolved, with its file, line and expression: tests/test_system_packages.py names what
each of those runs, so that a new one fails until someone says.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import docs

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Use:
    """A program (a name looked up on PATH, or an absolute path), and where it is run."""

    program: str
    where: str  # file:line


@dataclass(frozen=True)
class Unresolved:
    """A command whose first word the scan cannot tell."""

    file: str
    line: int
    text: str  # the expression (Python) or the word (shell)


@dataclass
class Found:
    uses: list[Use] = field(default_factory=list)
    unresolved: list[Unresolved] = field(default_factory=list)
    local: set[str] = field(default_factory=set)  # the checkout's or a virtualenv's files

    def extend(self, other: Found) -> None:
        self.uses += other.uses
        self.unresolved += other.unresolved
        self.local |= other.local


# --- Shell ------------------------------------------------------------------------------

BUILTINS = {
    *[
        ":",
        ".",
        "[",
        "[[",
        "]]",
        "alias",
        "bg",
        "bind",
        "break",
        "builtin",
        "caller",
        "cd",
        "compgen",
        "complete",
        "continue",
        "declare",
    ],
    *[
        "dirs",
        "disown",
        "echo",
        "enable",
        "eval",
        "exit",
        "export",
        "false",
        "fc",
        "fg",
        "getopts",
        "hash",
        "help",
        "history",
        "jobs",
    ],
    *[
        "kill",
        "let",
        "local",
        "logout",
        "mapfile",
        "popd",
        "printf",
        "pushd",
        "pwd",
        "read",
        "readarray",
        "readonly",
        "return",
    ],
    *[
        "set",
        "shift",
        "shopt",
        "source",
        "suspend",
        "test",
        "times",
        "trap",
        "true",
        "type",
        "typeset",
        "ulimit",
        "umask",
    ],
    *["unalias", "unset", "wait"],
}
KEYWORDS_BEFORE = {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"}
KEYWORDS_AFTER = {"fi", "done", "esac", "}"}
# Runners that take a command: how many words of options they take before it.
RUNNERS = {"exec", "command", "nice", "env", "sudo", "nohup", "setsid", "timeout", "xargs"}
OPTION_WITH_VALUE = {"nice": {"-n"}, "sudo": {"-u", "-g"}, "timeout": {"-s", "-k"}}
PLACEHOLDER = "\x00"  # around a Python f-string's {value} (hex) in the shell text


def _shown(text: str) -> str:
    """A shell word with its placeholders shown as the f-string's {expressions}."""
    return re.sub(
        rf"{PLACEHOLDER}([0-9a-f]*){PLACEHOLDER}",
        lambda m: "{" + bytes.fromhex(m.group(1)).decode() + "}",
        text,
    )


def _strip_heredocs(text: str) -> str:
    lines, out, delimiter = text.split("\n"), [], None
    for line in lines:
        if delimiter is not None:
            out.append("")
            if line.strip() == delimiter:
                delimiter = None
            continue
        found = re.search(r"<<-?\s*(['\"]?)(\w+)\1", line)
        if found:
            delimiter = found.group(2)
        out.append(line)
    return "\n".join(out)


@dataclass
class _Word:
    text: str  # quotes removed; $-expansions kept as written
    line: int
    quoted: bool = False


def _lex(text: str, line: int = 1) -> tuple[list[_Word | str], list[tuple[str, int]]]:
    """Words and operators (str); and the command substitutions' inner texts, to lex on
    their own."""
    tokens: list[_Word | str] = []
    inner: list[tuple[str, int]] = []
    i, n = 0, len(text)
    word: list[str] | None = None
    quoted = False
    start = line

    def end_word() -> None:
        nonlocal word, quoted
        if word is not None:
            tokens.append(_Word("".join(word), start, quoted))
        word, quoted = None, False

    def begin() -> None:
        nonlocal word, start
        if word is None:
            word, start = [], line

    def matching(j: int, opening: str, closing: str) -> int:
        """The index just past the `closing` that ends what opened before j."""
        depth, k = 1, j
        while k < n and depth:
            c = text[k]
            if c == "\\":
                k += 2
                continue
            if c == "'" and opening != "{":
                k = text.index("'", k + 1) + 1 if "'" in text[k + 1 :] else n
                continue
            if c == opening:
                depth += 1
            elif c == closing:
                depth -= 1
            k += 1
        return k

    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            if text[i + 1] == "\n":
                line += 1
            else:
                begin()
                word.append(text[i + 1])  # type: ignore[union-attr]
            i += 2
            continue
        if c == "\n":
            end_word()
            tokens.append("\n")
            line += 1
            i += 1
            continue
        if c in " \t":
            end_word()
            i += 1
            continue
        if c == "#" and word is None:
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c == "'":
            begin()
            quoted = quoted or not word
            j = text.find("'", i + 1)
            j = n if j < 0 else j
            word.append(text[i + 1 : j])  # type: ignore[union-attr]
            line += text.count("\n", i, j)
            i = j + 1
            continue
        if c == '"':
            begin()
            quoted = quoted or not word
            j = i + 1
            while j < n and text[j] != '"':
                if text[j] == "\\":
                    j += 2
                    continue
                if text.startswith("$(", j) and not text.startswith("$((", j):
                    k = matching(j + 2, "(", ")")
                    inner.append((text[j + 2 : k - 1], line + text.count("\n", i, j)))
                    j = k
                    continue
                j += 1
            word.append(text[i + 1 : j])  # type: ignore[union-attr]
            line += text.count("\n", i, j)
            i = j + 1
            continue
        if text.startswith("((", i) and word is None:
            # Arithmetic, `(( i++ ))` or `for (( ... ))`: no command in it.
            k = matching(i + 2, "(", ")") + 1
            tokens.append(_Word("((...))", line))
            line += text.count("\n", i, k)
            i = k
            continue
        if text.startswith("$((", i):
            begin()
            k = matching(i + 3, "(", ")") + 1
            word.append(text[i:k])  # type: ignore[union-attr]
            i = k
            continue
        if text.startswith("$(", i) or text.startswith("<(", i) or text.startswith(">(", i):
            begin()
            k = matching(i + 2, "(", ")")
            inner.append((text[i + 2 : k - 1], line))
            word.append("$(...)")  # type: ignore[union-attr]
            line += text.count("\n", i, k)
            i = k
            continue
        if text.startswith("${", i):
            begin()
            k = matching(i + 2, "{", "}")
            word.append(text[i:k])  # type: ignore[union-attr]
            i = k
            continue
        if c == "`":
            begin()
            k = text.find("`", i + 1)
            k = n if k < 0 else k
            inner.append((text[i + 1 : k], line))
            word.append("$(...)")  # type: ignore[union-attr]
            i = k + 1
            continue
        if c in ";&|()":
            end_word()
            two = text[i : i + 2]
            if two in ("&&", "||", ";;", "|&", "&>"):
                if two == "&>":
                    tokens.append(">")
                else:
                    tokens.append(two)
                i += 2
            else:
                tokens.append(c)
                i += 1
            continue
        if c in "<>":
            # A redirection: a file descriptor number before it belongs to it.
            if word is not None and "".join(word).isdigit():
                word = None
            end_word()
            j = i
            while j < n and text[j] in "<>&":
                j += 1
            if text[i:j] in ("<<", "<<-", "<<<"):
                tokens.append("<<")
            else:
                tokens.append(">")
            while j < n and text[j] == "-":
                j += 1
            i = j
            continue
        begin()
        word.append(c)  # type: ignore[union-attr]
        i += 1
    end_word()
    return tokens, inner


def _commands(tokens: list[_Word | str], functions: set[str]) -> Iterator[list[_Word]]:
    """The simple commands: their words, past redirections, case patterns and arrays'
    elements (`name=(...)`); the names of the functions defined go to `functions`."""
    words: list[_Word] = []
    skip_next = False
    case_patterns = False
    array = False
    for token in tokens:
        if array:
            array = token != ")"
            continue
        if isinstance(token, str):
            if token in (">", "<<"):
                skip_next = True
                continue
            if token == ")" and case_patterns:
                words = []  # a case pattern
                continue
            if token == "(" and words and words[-1].text.endswith("="):
                array = True
                continue
            if token == "(" and len(words) == 1:
                functions.add(words[0].text)  # a function's definition: name() {
                words = []
                continue
            if token == ";;":
                case_patterns = True
            if words:
                yield words
            words = []
            continue
        if skip_next:
            skip_next = False
            continue
        if not words and token.text == "case" and not token.quoted:
            case_patterns = True
        if token.text == "esac" and not token.quoted:
            case_patterns = False
        words.append(token)
    if words:
        yield words


_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\[[^]]*\])?\+?=(.*)$", re.DOTALL)
_VARIABLE = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


def _values(value: str) -> str:
    found = re.fullmatch(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?-([^}]*)\}", value)
    return found.group(1) if found else value


def _variables(commands: list[list[_Word]]) -> dict[str, set[str]]:
    """What the script's variables may hold: `name=value` (`${X:-default}` as its
    default), `local name=value`, and `for name in words`."""
    found: dict[str, set[str]] = {}
    for words in commands:
        while words and not words[0].quoted and words[0].text in KEYWORDS_BEFORE:
            words = words[1:]
        texts = [word.text for word in words]
        if texts[:1] in (["for"], ["select"]) and len(texts) > 2 and texts[2] == "in":
            found.setdefault(texts[1], set()).update(texts[3:])
            continue
        for word in words[1:] if texts[:1] in (["local"], ["export"], ["declare"]) else words:
            assigned = _ASSIGNMENT.match(word.text)
            if not assigned:
                break
            if not assigned.group(3).startswith("("):
                found.setdefault(assigned.group(1), set()).add(_values(assigned.group(3)))
    return found


def shell_programs(text: str, file: str, line: int = 1) -> Found:
    """The programs a shell script runs (see the module's docstring)."""
    found = Found()
    texts = [(_strip_heredocs(text), line)]
    commands: list[list[_Word]] = []
    functions: set[str] = set()
    while texts:
        body, first = texts.pop()
        tokens, inner = _lex(body, first)
        texts += inner
        commands += list(_commands(tokens, functions))
    variables = _variables(commands)
    for words in commands:
        _one_command(words, variables, functions, file, found)
    return found


def _expand(word: _Word, variables: dict[str, set[str]], seen: frozenset = frozenset()) -> set:
    """The literal texts a word may be; None in the set when it may be something unknown."""
    if PLACEHOLDER in word.text:
        return {None}
    variable = _VARIABLE.match(word.text)
    if variable:
        name = variable.group(1)
        if name not in variables or name in seen:
            return {None}
        out: set = set()
        for value in variables[name]:
            out |= _expand(_Word(value, word.line), variables, seen | {name})
        return out
    if "$" in word.text:
        return {None}
    return {word.text}


def _one_command(
    words: list[_Word], variables: dict[str, set[str]], functions: set[str], file: str, found
) -> None:
    i = 0
    while i < len(words):
        word = words[i]
        if not word.quoted and (word.text in KEYWORDS_BEFORE or word.text in KEYWORDS_AFTER):
            i += 1
            continue
        if _ASSIGNMENT.match(word.text) and not word.quoted:
            i += 1
            continue
        break
    if i >= len(words):
        return
    word = words[i]
    if word.text in (
        "for",
        "case",
        "select",
        "function",
        "[[",
        "((...))",
        "local",
        "export",
        "declare",
    ):
        return
    values = _expand(word, variables)
    if None in values:
        found.unresolved.append(Unresolved(file, word.line, _shown(word.text)))
    for value in values - {None}:
        rest = words[i + 1 :]
        if value == "":
            _one_command(rest, variables, functions, file, found)
            continue
        if (value in BUILTINS and value != "command") or value in functions:
            continue
        if value == "command" and rest and rest[0].text in ("-v", "-V"):
            for name in rest[1:]:
                for each in _expand(name, variables) - {None}:
                    _program(each, f"{file}:{name.line}", found)
            continue
        if value not in ("command", "exec"):
            _program(value, f"{file}:{word.line}", found)
        if value in RUNNERS:
            takes = OPTION_WITH_VALUE.get(value, set())
            j = 0
            while j < len(rest) and (
                rest[j].text.startswith("-") or (value == "env" and "=" in rest[j].text)
            ):
                j += 2 if rest[j].text in takes else 1
            if value == "timeout" and j < len(rest):
                j += 1  # the duration
            _one_command(rest[j:], variables, functions, file, found)


def _program(name: str, where: str, found: Found) -> None:
    if name.startswith("/"):
        found.uses.append(Use(name, where))
    elif "/" in name:
        found.local.add(name)  # scripts/…, .venv/bin/…: the checkout's own
    elif re.fullmatch(r"[A-Za-z0-9_.+-]+", name):
        found.uses.append(Use(name, where))


# --- Python -----------------------------------------------------------------------------

EXEC = {
    "subprocess.run",
    "subprocess.Popen",
    "subprocess.call",
    "subprocess.check_call",
    "subprocess.check_output",
    "asyncio.create_subprocess_exec",
    "os.execv",
    "os.execvp",
    "os.execvpe",
    "os.execl",
    "os.execlp",
}
SHELLS = {"bash", "sh", "/bin/bash", "/bin/sh", "/usr/bin/bash"}
MAX_DEPTH = 8


@dataclass(frozen=True)
class _Program:
    name: str


@dataclass(frozen=True)
class _Local:
    text: str


@dataclass(frozen=True)
class _Param:
    function: ast.AST
    name: str
    argv: bool = False  # the whole command (else its first word)


@dataclass(frozen=True)
class _Unknown:
    text: str


_EMPTY = "empty"


@dataclass
class _Context:
    module: _Module
    function: ast.FunctionDef | ast.AsyncFunctionDef | None
    env: dict[str, tuple[ast.expr, _Context]] = field(default_factory=dict)
    depth: int = 0


class _Module:
    def __init__(self, path: Path, package: str, scan: PythonScan) -> None:
        self.path = path
        self.file = str(path.relative_to(ROOT))
        self.scan = scan
        self.name = f"{package}.{path.stem}" if package else path.stem
        self.package = package
        self.tree = ast.parse(path.read_text(), str(path))
        self.parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
        self.functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        self.imports: dict[str, tuple[str, str]] = {}  # local name -> (module, name)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self.functions.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                base = node.module
                if node.level:
                    parts = package.split(".") if package else []
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join([*parts, node.module])
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (base, alias.name)

    def enclosing(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                return node
        return None

    def enclosing_class(self, node: ast.AST) -> ast.ClassDef | None:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, ast.ClassDef):
                return node
        return None

    def where(self, node: ast.AST) -> str:
        return f"{self.file}:{getattr(node, 'lineno', 0)}"


def _assigned(scope: ast.AST, name: str) -> list[ast.expr]:
    """The values assigned to `name` directly in `scope` (not in functions within it)."""
    values: list[ast.expr] = []
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == name:
                    values.append(node.value)
        elif (
            isinstance(node, ast.AnnAssign | ast.NamedExpr)
            and node.value is not None
            and isinstance(node.target, ast.Name)
            and node.target.id == name
        ):
            values.append(node.value)
        todo.extend(ast.iter_child_nodes(node))
    return values


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = function.args
    names = [arg.arg for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]]
    if a.vararg:
        names.append(a.vararg.arg)
    if a.kwarg:
        names.append(a.kwarg.arg)
    return names


class PythonScan:
    def __init__(self, paths: list[Path]) -> None:
        self.modules: dict[str, _Module] = {}
        for path in paths:
            relative = path.relative_to(ROOT)
            package = ".".join(relative.parent.parts)
            module = _Module(path, package, self)
            self.modules[module.name] = module
        self.found = Found()
        self.wrappers: dict[ast.AST, tuple[_Module, list[tuple[ast.expr, ast.AST]]]] = {}

    # Resolution of the first word of a command --------------------------------------

    def first(self, expr: ast.expr, ctx: _Context) -> set:
        """The possible first words of the sequence `expr`."""
        if ctx.depth > MAX_DEPTH:
            return {_Unknown(ast.unparse(expr))}
        if isinstance(expr, ast.List | ast.Tuple):
            return self._first_of(expr.elts, ctx)
        if isinstance(expr, ast.ListComp | ast.GeneratorExp):
            return self.first(expr.generators[0].iter, ctx)
        if isinstance(expr, ast.IfExp):
            return self.first(expr.body, ctx) | self.first(expr.orelse, ctx)
        if isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.Or):
            out: set = set()
            for value in expr.values:
                out |= self.first(value, ctx)
            return out
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left = self.first(expr.left, ctx)
            if _EMPTY in left:
                left = (left - {_EMPTY}) | self.first(expr.right, ctx)
            return left
        if isinstance(expr, ast.Call) and ast.unparse(expr.func) in ("list", "tuple"):
            return self.first(expr.args[0], ctx) if expr.args else {_EMPTY}
        if isinstance(expr, ast.Name | ast.Attribute):
            return self._lookup(expr, ctx, self.first)
        if isinstance(expr, ast.Call):
            return self._returned(expr, ctx, self.first)
        return {_Unknown(ast.unparse(expr))}

    def _first_of(self, elements: list[ast.expr], ctx: _Context) -> set:
        out: set = set()
        for element in elements:
            if isinstance(element, ast.Starred):
                got = self.first(element.value, ctx)
                out |= got - {_EMPTY}
                if _EMPTY not in got:
                    return out
                continue
            return out | self.word(element, ctx)
        return out | {_EMPTY}

    def word(self, expr: ast.expr, ctx: _Context) -> set:
        """The possible values of the single word `expr`."""
        if ctx.depth > MAX_DEPTH:
            return {_Unknown(ast.unparse(expr))}
        text = ast.unparse(expr)
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            value = expr.value
            if value.startswith("/") or "/" not in value:
                return {_Program(value)}
            return {_Local(value)}
        if text == "sys.executable":
            return {_Program("python3")}
        if "sys.executable" in text:
            return {_Local(text)}  # beside the interpreter: its virtualenv's
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):
            parts = []
            node: ast.expr = expr
            while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                parts.append(node.right)
                node = node.left
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "Path" and node.args:
                node = node.args[0]
            absolute = isinstance(node, ast.Constant) and str(node.value).startswith("/")
            if absolute and all(isinstance(p, ast.Constant) for p in parts):
                pieces = [str(node.value), *(str(p.value) for p in reversed(parts))]  # type: ignore[union-attr]
                return {_Program("/".join(pieces))}
            return {_Local(text)}  # under a folder of the checkout, a test's or a venv's
        if isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.Or):
            out: set = set()
            for value in expr.values:
                out |= self.word(value, ctx)
            return out
        if isinstance(expr, ast.IfExp):
            return self.word(expr.body, ctx) | self.word(expr.orelse, ctx)
        if isinstance(expr, ast.Call):
            called = ast.unparse(expr.func)
            if called in ("str", "os.fspath", "shutil.which") and expr.args:
                return self.word(expr.args[0], ctx)
            return self._returned(expr, ctx, self.word)
        if isinstance(expr, ast.Name | ast.Attribute):
            return self._lookup(expr, ctx, self.word)
        return {_Unknown(text)}

    def _lookup(self, expr: ast.Name | ast.Attribute, ctx: _Context, how) -> set:
        text = ast.unparse(expr)
        deeper = _Context(ctx.module, ctx.function, ctx.env, ctx.depth + 1)
        if isinstance(expr, ast.Attribute):
            # self.name: what the class's methods assign to it.
            if isinstance(expr.value, ast.Name) and expr.value.id == "self" and ctx.function:
                cls = ctx.module.enclosing_class(ctx.function)
                values = []
                for node in ast.walk(cls) if cls else ():
                    if isinstance(node, ast.Assign):
                        for target in node.targets:
                            if ast.unparse(target) == text:
                                values.append((node.value, ctx.module.enclosing(node)))
                out: set = set()
                for value, function in values:
                    out |= how(value, _Context(ctx.module, function, {}, ctx.depth + 1))
                return out or {_Unknown(text)}
            return {_Unknown(text)}
        name = expr.id
        comprehension = self._comprehension(expr, name, ctx.module)
        if comprehension is not None and how == self.word:
            # `for tool in TOOLS` in a comprehension: each of the iterable's elements.
            out = set()
            for element in self._all(comprehension.iter, ctx):
                out |= self.word(element, deeper)
            return out or {_Unknown(text)}
        if name in ctx.env:
            bound, where = ctx.env[name]
            return how(bound, _Context(where.module, where.function, where.env, ctx.depth + 1))
        function = ctx.function
        while function is not None:
            values = _assigned(function, name)
            if values:
                out = set()
                for value in values:
                    out |= how(value, _Context(ctx.module, function, ctx.env, ctx.depth + 1))
                return out
            if name in _parameters(function):
                return {_Param(function, name, how == self.first)}
            function = ctx.module.enclosing(function)
        values = _assigned(ctx.module.tree, name)
        if values:
            out = set()
            for value in values:
                out |= how(value, _Context(ctx.module, None, {}, deeper.depth))
            return out
        if name in ctx.module.imports:
            module, original = ctx.module.imports[name]
            other = self.modules.get(module)
            if other is not None:
                return self._lookup(
                    ast.Name(original), _Context(other, None, {}, deeper.depth), how
                )
        return {_Unknown(text)}

    def _comprehension(self, expr: ast.Name, name: str, module: _Module):
        node: ast.AST = expr
        while node in module.parents:
            node = module.parents[node]
            if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
                for generator in node.generators:
                    if isinstance(generator.target, ast.Name) and generator.target.id == name:
                        return generator
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                return None
        return None

    def _all(self, expr: ast.expr, ctx: _Context) -> list[ast.expr]:
        """The elements of a literal sequence, or of the one a name is assigned."""
        if isinstance(expr, ast.List | ast.Tuple | ast.Set):
            return list(expr.elts)
        if isinstance(expr, ast.Name):
            values = _assigned(ctx.function, expr.id) if ctx.function else []
            values = values or _assigned(ctx.module.tree, expr.id)
            if len(values) == 1:
                return self._all(values[0], ctx)
        return []

    def _function(
        self, call: ast.Call, ctx: _Context
    ) -> tuple[_Module, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        func = call.func
        module = ctx.module
        if isinstance(func, ast.Name):
            name = func.id
            if name not in module.functions and name in module.imports:
                base, original = module.imports[name]
                other = self.modules.get(base)
                if other is None or original not in other.functions:
                    return None
                return other, other.functions[original][0]
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
        ):
            name = func.attr
        else:
            return None
        candidates = module.functions.get(name, [])
        return (module, candidates[0]) if len(candidates) == 1 else None

    def _bind(self, call: ast.Call, function, ctx: _Context) -> dict:
        a = function.args
        positional = [arg.arg for arg in [*a.posonlyargs, *a.args]]
        if positional[:1] == ["self"] and (
            isinstance(call.func, ast.Attribute) or function.name == "__init__"
        ):
            positional = positional[1:]
        env: dict[str, tuple[ast.expr, _Context]] = {}
        args = list(call.args)
        for name, value in zip(positional, args, strict=False):
            if isinstance(value, ast.Starred):
                break
            env[name] = (value, ctx)
        rest = args[len([n for n in positional if n in env]) :]
        if a.vararg:
            env[a.vararg.arg] = (ast.Tuple(rest, ast.Load()), ctx)
        for keyword in call.keywords:
            if keyword.arg:
                env[keyword.arg] = (keyword.value, ctx)
        return env

    def _returned(self, call: ast.Call, ctx: _Context, how) -> set:
        target = self._function(call, ctx)
        if target is None:
            return {_Unknown(ast.unparse(call))}
        module, function = target
        env = self._bind(call, function, ctx)
        inner = _Context(module, function, env, ctx.depth + 1)
        out: set = set()
        for node in ast.walk(function):
            returned = isinstance(node, ast.Return) and node.value is not None
            if returned and module.enclosing(node) is function:
                out |= how(node.value, inner)  # type: ignore[union-attr]
        return out or {_Unknown(ast.unparse(call))}

    # The calls -------------------------------------------------------------------------

    def _argv(self, call: ast.Call, module: _Module) -> tuple[ast.expr, bool] | None:
        """The command a call runs, and whether it is an argv (not a name to look up)."""
        name = ast.unparse(call.func)
        if name == "shutil.which":
            return (call.args[0], False) if call.args else None
        if name in EXEC and call.args:
            if name in ("asyncio.create_subprocess_exec", "os.execl", "os.execlp"):
                return ast.Tuple(list(call.args), ast.Load()), True
            if name.startswith("os.exec"):
                return (call.args[1] if len(call.args) > 1 else call.args[0]), True
            return call.args[0], True
        for i, arg in enumerate(call.args[:-1]):  # asyncio.to_thread(subprocess.run, argv)
            if ast.unparse(arg) in EXEC:
                return call.args[i + 1], True
        return None

    def scan(self) -> Found:
        todo: list[tuple[_Module, ast.expr, bool, _Context, ast.AST]] = []
        for module in self.modules.values():
            for node in ast.walk(module.tree):
                if isinstance(node, ast.Call):
                    got = self._argv(node, module)
                    if got is not None:
                        ctx = _Context(module, module.enclosing(node))
                        todo.append((module, got[0], got[1], ctx, node))
        done: set[tuple[int, str]] = set()
        while todo:
            module, expr, is_argv, ctx, site = todo.pop()
            results = self.first(expr, ctx) if is_argv else self.word(expr, ctx)
            where = module.where(site)
            for result in results:
                if isinstance(result, _Program):
                    key = (id(site), result.name + where + str(id(ctx)))
                    if key in done:
                        continue
                    done.add(key)
                    _program(result.name, where, self.found)
                    if is_argv and result.name in SHELLS:
                        self._shell(expr, ctx, module, site)
                elif isinstance(result, _Local):
                    self.found.local.add(result.text)
                elif isinstance(result, _Param):
                    # A parameter: the command (or its first word) each caller passes.
                    if ctx.depth > MAX_DEPTH:
                        continue
                    for caller_module, call in self._callers(result.function, module):
                        caller = _Context(caller_module, caller_module.enclosing(call))
                        env = self._bind(call, result.function, caller)
                        if result.name not in env:
                            continue  # left to its default
                        bound, at = env[result.name]
                        deeper = _Context(at.module, at.function, at.env, ctx.depth + 1)
                        todo.append((at.module, bound, result.argv, deeper, call))
                elif isinstance(result, _Unknown):
                    self.found.unresolved.append(
                        Unresolved(module.file, getattr(site, "lineno", 0), result.text)
                    )
        return self.found

    def _callers(self, function, module: _Module) -> Iterator[tuple[_Module, ast.Call]]:
        """The calls of `function` in its module, and in the modules that import it."""
        cls = module.enclosing_class(function)
        names = {function.name}
        if function.name == "__init__" and cls is not None:
            names = {cls.name}
        for other in self.modules.values():
            visible = {
                n
                for n in names
                if other is module
                or (n in other.imports and self.modules.get(other.imports[n][0]) is module)
            }
            if not visible:
                continue
            for node in ast.walk(other.tree):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                if (isinstance(func, ast.Name) and func.id in visible) or (
                    other is module
                    and cls is not None
                    and isinstance(func, ast.Attribute)
                    and isinstance(func.value, ast.Name)
                    and func.value.id == "self"
                    and func.attr == function.name
                ):
                    yield other, node

    def _shell(self, expr: ast.expr, ctx: _Context, module: _Module, site: ast.AST) -> None:
        """The script a `bash -c` runs, read as shell when the scan can tell its text."""
        elements = self._elements(expr, ctx)
        if elements is None:
            return
        for i, element in enumerate(elements[:-1]):
            if not (isinstance(element, ast.Constant) and str(element.value).startswith("-")):
                continue
            if "c" not in str(element.value):
                continue
            script = elements[i + 1]
            text = self._text(script, ctx)
            line = getattr(site, "lineno", 0)
            if isinstance(text, _Param):
                # The script is a parameter: read it as each caller passes it.
                if ctx.depth < MAX_DEPTH:
                    for caller_module, call in self._callers(text.function, module):
                        caller = _Context(caller_module, caller_module.enclosing(call))
                        env = self._bind(call, text.function, caller)
                        inner = _Context(module, text.function, env, ctx.depth + 1)
                        self._shell(expr, inner, caller_module, call)
            elif text is None:
                self.found.unresolved.append(
                    Unresolved(module.file, line, f"bash -c {ast.unparse(script)}")
                )
            else:
                self.found.extend(shell_programs(text, module.file, line))
            return

    def _elements(self, expr: ast.expr, ctx: _Context) -> list[ast.expr] | None:
        while isinstance(expr, ast.Name) and expr.id in ctx.env:
            expr, ctx = ctx.env[expr.id][0], ctx.env[expr.id][1]
        if isinstance(expr, ast.List | ast.Tuple):
            return list(expr.elts)
        return None

    def _text(self, expr: ast.expr, ctx: _Context, depth: int = 0) -> str | _Param | None:
        if depth > MAX_DEPTH:
            return None
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return expr.value
        if isinstance(expr, ast.JoinedStr):
            parts = []
            for value in expr.values:
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                else:
                    inner = self._text(value.value, ctx, depth + 1)  # type: ignore[attr-defined]
                    shown = ast.unparse(value.value).encode().hex()  # type: ignore[attr-defined]
                    parts.append(inner if inner is not None else PLACEHOLDER + shown + PLACEHOLDER)
            return "".join(parts)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left, right = (
                self._text(expr.left, ctx, depth + 1),
                self._text(expr.right, ctx, depth + 1),
            )
            return None if left is None or right is None else left + right
        if isinstance(expr, ast.Name):
            if expr.id in ctx.env:
                bound, where = ctx.env[expr.id]
                return self._text(bound, where, depth + 1)
            scope = ctx.function
            while scope is not None:
                values = _assigned(scope, expr.id)
                if len(values) == 1:
                    return self._text(values[0], _Context(ctx.module, scope, ctx.env), depth + 1)
                if expr.id in _parameters(scope):
                    return _Param(scope, expr.id) if depth == 0 else None
                scope = ctx.module.enclosing(scope)
        return None


def python_programs(paths: list[Path]) -> Found:
    return PythonScan(paths).scan()


# The page whose ```sh blocks tests run with bash (tests/test_client.py's client_blocks).
CLIENT_PAGE = "docs/client.md"


def client_page_shell_blocks() -> list[tuple[str, int]]:
    """The ```sh blocks of "Report from your code" (docs/client.md), which tests run with
    bash, and the line each starts on."""
    return docs.blocks_with_lines(docs.page("client"), "sh")


def sources() -> tuple[list[Path], list[Path]]:
    """The Python and the shell files to scan: tests/, bench/, scripts/."""
    python = sorted((ROOT / "tests").glob("*.py")) + sorted((ROOT / "bench").rglob("*.py"))
    # Not the check itself, which looks up every name it finds.
    python = [p for p in python if p.name not in ("programs.py", "test_system_packages.py")]
    shell = []
    for path in sorted((ROOT / "scripts").iterdir()):
        if not path.is_file():
            continue
        first = path.read_text(errors="replace").split("\n", 1)[0]
        if "python" in first:
            python.append(path)
        elif "sh" in first:
            shell.append(path)
    return python, shell


def scan() -> Found:
    python, shell = sources()
    found = Found()
    found.extend(python_programs([p for p in python if p.suffix == ".py"]))
    for path in python:
        if path.suffix != ".py":
            found.extend(_python_script(path))
    for path in shell:
        found.extend(shell_programs(path.read_text(), str(path.relative_to(ROOT))))
    for text, line in client_page_shell_blocks():
        found.extend(shell_programs(text, CLIENT_PAGE, line))
    return found


def _python_script(path: Path) -> Found:
    """A Python script without the .py suffix (scripts/bytecode)."""
    copy = PythonScan.__new__(PythonScan)
    copy.modules = {}
    module = _Module.__new__(_Module)
    module.path, module.file, module.scan = path, str(path.relative_to(ROOT)), copy
    module.name, module.package = path.name, ""
    module.tree = ast.parse(path.read_text(), str(path))
    module.parents = {c: n for n in ast.walk(module.tree) for c in ast.iter_child_nodes(n)}
    module.functions, module.imports = {}, {}
    for node in ast.walk(module.tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            module.functions.setdefault(node.name, []).append(node)
    copy.modules[module.name] = module
    copy.found = Found()
    copy.wrappers = {}
    return copy.scan()
