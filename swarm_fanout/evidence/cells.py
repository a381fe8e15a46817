"""What a tool call's code did, read as code (an ipython cell, docs/product-contract.md §9):
the files it names and writes, and its *sources*, what its result may have been worked out
from (docs/rubric.md "What is read", which gives the forms and the flows by statement).
Python is parsed with `ast`; IPython's magics and `!` lines, and strings handed to
`subprocess` or `os.system`, are read as shell with `shlex`. A value's *texts* are the
strings it may hold, folded from literals, with `{name}` for a part known only at run time.
"""

from __future__ import annotations

import ast
import os
import shlex
from typing import NamedTuple

from swarm_fanout.evidence.fixture import SHARDS_DIR

MAX_CODE_CHARS = 1 << 20
MAX_TEXTS = 16  # strings one value may hold
MAX_PATH_CHARS = 1024
MAX_PATHS_PER_CALL = 64
NETWORK = {"socket", "urllib", "urllib3", "http", "requests", "httpx", "aiohttp", "ftplib",
           "smtplib", "telnetlib"}  # fmt: skip
KINDS = {  # calls and attributes that open a channel that is no file (methods: METHODS)
    "asyncio.open_connection": "network", "asyncio.start_server": "network",
    "glob.glob": "listing", "glob.iglob": "listing", "glob": "listing", "rglob": "listing",
    "iterdir": "listing", "os.listdir": "listing", "os.scandir": "listing", "os.walk": "listing",
    "os.environ": "environment", "os.environb": "environment", "os.getenv": "environment",
    "eval": "code_from_text", "exec": "code_from_text", "compile": "code_from_text",
    "chr": "joined_path", "fromhex": "joined_path", "b64decode": "joined_path",
    "unhexlify": "joined_path",
}  # fmt: skip
METHODS = {"glob", "rglob", "iterdir", "fromhex", "b64decode", "unhexlify"}
COMMANDS = {"curl": "network", "wget": "network", "nc": "network", "ssh": "network",
            "ls": "listing", "find": "listing", "env": "environment",
            "printenv": "environment"}  # fmt: skip
SHELL_CALLS = {"os.system", "os.popen", "subprocess.run", "subprocess.call", "subprocess.Popen",
               "subprocess.check_call", "subprocess.check_output",
               "subprocess.getoutput"}  # fmt: skip
JOINS = {"Path", "PurePath", "PosixPath", "pathlib.Path", "os.path.join", "joinpath", "str",
         "os.fspath", "os.path.abspath", "os.path.normpath", "os.path.realpath", "resolve",
         "absolute"}  # fmt: skip
WRITE_METHODS = {"write_text", "write_bytes", "touch", "write", "writelines", "to_csv", "to_json"}
MOVES = {"shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.move", "os.rename",
         "os.replace"}  # fmt: skip
DUMPS = {"json.dump", "pickle.dump", "yaml.dump", "yaml.safe_dump"}
SHELL_MAGICS = {"bash", "sh", "script", "system", "sx"}
TIMING_MAGICS = {"time", "timeit", "capture", "prun"}
ALIASES = {"cd", "ls", "cat", "cp", "mv", "rm", "mkdir", "pwd"}  # IPython's automagics
SHELL_OPS = {";", "&&", "||", "|", "&", "(", ")"}
CONTAINERS = (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.IfExp, ast.BoolOp, ast.Await, ast.Starred)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


class Cell(NamedTuple):
    """The paths one call names and writes, as typed (resolved by the reader of the record
    against the session's cwd), and its sources: those files and the channels it opened
    (`<network>`, `<listing>`, `<environment>`, `<joined_path>`, `<code_from_text>`, and
    `<shards_dir>` where it names the shards' dir). Code that does not parse is unreadable:
    it names, writes and binds nothing."""

    named: frozenset[str]
    written: frozenset[str]
    sources: frozenset[str]
    readable: bool = True


class V(NamedTuple):
    """A value: the strings it may hold (none: not known before it runs), what it drew on."""

    texts: frozenset[str] = frozenset()
    draws: frozenset[str] = frozenset()


NOTHING = V()
EMPTY: frozenset[str] = frozenset()


def channel(source: str) -> str | None:
    """The channel a source names (`<network>` -> network), None for a path."""
    return source[1:-1] if source.startswith("<") and source.endswith(">") else None


def is_path(text: str) -> bool:
    """A string with no space that holds a `/` or ends in a file extension."""
    if not 0 < len(text) <= MAX_PATH_CHARS or text.startswith(("http:", "https:")):
        return False
    _, dot, ext = text.rpartition(".")
    extension = bool(dot) and ext[:1].isalpha() and ext.isalnum() and len(ext) <= 8
    spaced = " " in text or "\n" in text or "\t" in text or "\r" in text
    return not spaced and ("/" in text or extension)


def _join(parts: list[tuple[V, ast.AST]], sep: str = "") -> frozenset[str]:
    """Every way the parts' texts join, an unknown part as `{name}`; none if none is known."""
    texts = [""]
    for value, node in parts:
        hole = {f"{{{node.id}}}" if isinstance(node, ast.Name) else "{}"}
        joined = {a + sep + b if a and sep else a + b for a in texts for b in value.texts or hole}
        texts = sorted(text for text in joined if len(text) <= MAX_PATH_CHARS)[:MAX_TEXTS]
    known = any(value.texts for value, _ in parts)
    return frozenset(texts) if known else EMPTY


class Session:
    """What a session's kernel holds between cells: each name's texts and sources, each file's
    sources (`/` + its typed path), the imports, what functions write, and the cwd."""

    def __init__(self) -> None:
        self.texts: dict[str, frozenset[str]] = {}
        self.flows: dict[str, frozenset[str]] = {}
        self.aliases: dict[str, str] = {}
        self.writes: dict[str, frozenset[str]] = {}
        self.cwd = ""

    def read(self, code: str) -> Cell:
        """The cell `code`, read against the session, its bindings left in it."""
        reader, cell = _Reader(self), Cell(EMPTY, EMPTY, EMPTY, False)
        try:
            if len(code) <= MAX_CODE_CHARS:
                reader.block(ast.parse(reader.set_aside(code)).body)
                cell = Cell(*map(frozenset, (reader.named, reader.written, reader.drawn)))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            pass
        return cell


class _Reader:
    def __init__(self, session: Session) -> None:
        self.s = session
        self.named: set[str] = set()
        self.written: set[str] = set()
        self.drawn: set[str] = set()
        self.context = EMPTY  # what the tests of the enclosing loops and branches drew on
        self.shell_cwd = ""
        self.outputs: dict[str, frozenset[str]] = {}  # what each `!cmd` bound to a name drew on

    # --- IPython's syntax and the shell ------------------------------------------------

    def set_aside(self, code: str) -> str:
        """The cell's Python, its magics and `!` lines read as shell and left out."""
        first, _, rest = code.lstrip("\n").partition("\n")
        if first.startswith("%%"):
            magic, _, args = first[2:].partition(" ")
            for line in rest.splitlines() if magic in SHELL_MAGICS else ():
                self.shell(line, keep=True)
            if magic == "writefile":
                words = [word for word in args.split() if not word.startswith("-")]
                self.use(V(frozenset(words[-1:])), write=True)
            code = rest if magic in TIMING_MAGICS else ""
        lines = []
        for line in code.splitlines():
            body = line.lstrip()
            if "!" not in body and "%" not in body and body.partition(" ")[0] not in ALIASES:
                lines.append(line)
                continue
            indent = line[: len(line) - len(body)]
            head, eq, tail = body.partition("=")
            word, _, after = body.partition(" ")
            if body.startswith("%") and word[1:] in TIMING_MAGICS:
                line = indent + after
            elif body.startswith(("!", "%")):
                self.shell(body[1:], cd=body.startswith("%"))
                line = indent + "pass"
            elif eq and tail.lstrip()[:1] in ("!", "%") and head.strip().isidentifier():
                output = f"__shell_output_{len(self.outputs)}__"  # what `out = !cmd` binds
                self.outputs[output] = self.shell(tail.lstrip()[1:])
                line = f"{indent}{head.strip()} = {output}"
            elif word in ALIASES and not any(mark in body for mark in "=([,'\""):
                self.shell(body, cd=True)
                line = indent + "pass"
            lines.append(line)
        return "\n".join(lines)

    def shell(
        self, command: str, cd: bool = False, keep: bool = False, depth: int = 0
    ) -> frozenset[str]:
        """A shell command line, and what it drew on; its `cd` moves the kernel's cwd for
        `%cd` (`cd`), the rest of the cell's for `%%bash` (`keep`), else the rest of the line's."""
        self.shell_cwd = self.shell_cwd if keep else ""
        try:
            lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            words = list(lexer)[:256]
        except ValueError:
            words = command.split()[:256]
        segment: list[str] = []
        piped = drawn = EMPTY  # what the command before a `|` drew on; what all did
        for word in [*words[words[:1] in (["system"], ["sx"]) :], ";"]:
            if word not in SHELL_OPS:
                segment.append(word)
            elif segment and segment[0] == "cd":
                target = os.path.join(self.s.cwd if cd else self.shell_cwd, *segment[1:2] or "~")
                self.s.cwd, self.shell_cwd = (
                    (os.path.normpath(target), self.shell_cwd) if cd else (self.s.cwd, target)
                )
                segment = []
            elif segment:
                piped = self.command(segment, depth, piped)
                drawn |= piped
                piped, segment = piped if word == "|" else EMPTY, []
        return drawn

    def command(self, words: list[str], depth: int, piped: frozenset[str]) -> frozenset[str]:
        """One simple command: what it reads and writes (`>`, `>>`, `tee`, `cp`, `mv`), and
        what it drew on, its input from a pipe included."""
        while "=" in words[0] and words[0].split("=")[0].isidentifier() and len(words) > 1:
            words = words[1:]
        name = os.path.basename(words[0])
        marks = {f"<{COMMANDS[name]}>"} if name in COMMANDS else set()
        if name in ("bash", "sh") and "-c" in words[1:-1] and depth < 2:
            marks |= self.shell(words[words.index("-c") + 1], keep=True, depth=depth + 1)
        # The paths it names: its arguments, and those it reads (`<`) and writes (`>`) by redirect.
        files: dict[str | None, list[str]] = {None: [], "<": [], ">": []}
        redirect = None
        for word in words[1:]:
            marks |= {"<environment>"} if "$" in word else set()
            marks |= {"<network>"} if "/dev/tcp/" in word else set()
            if not word.startswith("-") and is_path(word):
                files[redirect].append(os.path.normpath(os.path.join(self.shell_cwd, word)))
            redirect = {"<": "<", ">": ">", ">>": ">", ">|": ">"}.get(word)
        arguments, reads, writes = files.values()
        written = {"tee": len(arguments), "cp": 1, "mv": 1}.get(name, 0)  # its last arguments
        reads += arguments[: len(arguments) - written]
        writes += arguments[len(arguments) - written :]
        self.drawn |= marks
        drawn = self.use(V(frozenset(reads))) | marks | piped
        self.use(V(frozenset(writes), drawn), write=True)
        return drawn

    # --- files -----------------------------------------------------------------------

    def use(self, value: V, write: bool = False) -> frozenset[str]:
        """The files among `value`'s texts named (and written, then drawing on what the
        value drew on); returns what using them draws on."""
        drawn: set[str] = set()
        for text in value.texts:
            if text == SHARDS_DIR:
                drawn.add(f"<{SHARDS_DIR}_dir>")
            if not is_path(text):
                continue
            path = text
            if self.s.cwd and not text.startswith(("/", "~", "{")):
                path = os.path.normpath(os.path.join(self.s.cwd, text))
            key = "/" + os.path.normpath(path)
            drawn |= {path, *self.s.flows.get(key, ())}
            if path.split("/")[0] == SHARDS_DIR or path.startswith(f"./{SHARDS_DIR}/"):
                drawn.add(f"<{SHARDS_DIR}_dir>")
            drawn |= {"<joined_path>"} if "{" in path else set()
            if len(self.named) < MAX_PATHS_PER_CALL:
                self.named.add(path)
                if write:
                    self.written.add(path)
                    self.s.flows[key] = value.draws | self.context
        self.drawn |= drawn
        return frozenset(drawn)

    # --- statements ------------------------------------------------------------------

    def block(self, body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Expr):
                self.expr(node.value)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                value = self.expr(node.value)
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    self.bind(target, value, node.value)
            elif isinstance(node, ast.AugAssign):
                old, value = self.expr(node.target), self.expr(node.value)
                self.bind(node.target, V(EMPTY, old.draws | value.draws))
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                self.nested([(node.iter, node.target)], node.body + node.orelse)
            elif isinstance(node, (ast.While, ast.If)):
                self.nested([(node.test, None)], node.body + node.orelse)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                items = [(item.context_expr, item.optional_vars) for item in node.items]
                self.nested(items, node.body)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.define(node)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    module = ".".join(filter(None, [getattr(node, "module", ""), alias.name]))
                    short = alias.asname or alias.name.split(".")[0]
                    whole = alias.asname or isinstance(node, ast.ImportFrom)
                    self.s.aliases[short] = module if whole else short
                    self.drawn |= {"<network>"} if module.split(".")[0] in NETWORK else set()
            else:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.expr):
                        self.expr(child)
                    else:  # a statement, an except clause, a match case
                        self.block(
                            [child] if isinstance(child, ast.stmt) else getattr(child, "body", [])
                        )

    def nested(self, tests: list, body: list[ast.stmt]) -> None:
        """A loop, branch or `with`: what binds inside draws on its tests too."""
        outer = self.context
        for test, target in tests:
            value = self.expr(test)
            self.context |= value.draws
            if target is not None:
                self.bind(target, value)
        self.block(body)
        self.context = outer

    def define(self, node) -> None:
        """A function (or class) carries what its body reads and writes to where it is
        called; its body binds nothing in the session."""
        inner = _Reader(self.s)
        saved = (dict(self.s.texts), dict(self.s.flows), self.s.cwd)
        for argument in getattr(getattr(node, "args", None), "args", ()):
            self.s.texts.pop(argument.arg, None)
            self.s.flows.pop(argument.arg, None)
        inner.block(node.body)
        self.s.texts, self.s.flows, self.s.cwd = saved
        decorated = [self.expr(decorator).draws for decorator in node.decorator_list]
        self.s.texts.pop(node.name, None)
        self.s.flows[node.name] = frozenset(inner.drawn).union(self.context, *decorated)
        self.s.writes[node.name] = frozenset(inner.written)

    def bind(self, target: ast.expr, value: V, node: ast.expr | None = None) -> None:
        draws = value.draws | self.context
        if isinstance(target, ast.Name):
            self.s.texts[target.id] = value.texts
            self.s.flows[target.id] = draws
            fields = zip(getattr(node, "keys", ()), getattr(node, "values", ()), strict=False)
            for key, item in fields:
                if isinstance(key, ast.Constant):  # a record's fields: `task['file']`
                    self.s.texts[f"{target.id}[{key.value!r}]"] = self.expr(item).texts
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = getattr(node, "elts", [])
            for index, element in enumerate(target.elts):
                if len(items) == len(target.elts):
                    self.bind(element, self.expr(items[index]), items[index])
                else:
                    self.bind(element, V(value.texts, draws))
        elif isinstance(target, ast.Starred):
            self.bind(target.value, value)
        else:  # `rows[k] = …`, `record.field = …`
            self.changed(target, draws | self.expr(target).draws)

    def changed(self, node: ast.expr, draws: frozenset[str]) -> None:
        """A value changed in place (`rows[k] = …`, `rows.append(…)`) draws on more."""
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        if isinstance(node, ast.Name) and not draws <= self.s.flows.get(node.id, draws):
            self.s.flows[node.id] |= draws

    # --- expressions -----------------------------------------------------------------

    def expr(self, node: ast.expr | None) -> V:
        """The value of `node`; the files among its texts named, and all it drew on drawn."""
        value = self._value(node) if node is not None else NOTHING
        if value.texts:
            value = V(value.texts, value.draws | self.use(value))
        if value.draws:
            self.drawn |= value.draws
        return value

    def _value(self, node: ast.expr) -> V:
        if isinstance(node, ast.Name) and node.id in self.outputs:
            return V(EMPTY, self.outputs[node.id])
        if isinstance(node, ast.Name):
            return V(self.s.texts.get(node.id, EMPTY), self.s.flows.get(node.id, EMPTY))
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str) and len(node.value) <= MAX_PATH_CHARS:
                return V(frozenset({node.value}))
            return V(frozenset({str(node.value)})) if type(node.value) is int else NOTHING
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Await):
            return self.expr(node.value)
        if isinstance(node, ast.JoinedStr):  # f'shards/{name}': a formatted part is a hole
            parts = []
            for part in node.values:
                inner = part.value if isinstance(part, ast.FormattedValue) else part
                value = self.expr(inner)
                spec = getattr(part, "format_spec", None)
                parts.append((V(EMPTY, value.draws) if spec else value, inner))
            return V(_join(parts), frozenset().union(*(value.draws for value, _ in parts)))
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Div)):
            left, right = self.expr(node.left), self.expr(node.right)
            if all(text.lstrip("-").isdigit() for text in left.texts | right.texts):
                return V(EMPTY, left.draws | right.draws)  # `n / 2`, `7 + 4`, nothing known
            sep = "/" if isinstance(node.op, ast.Div) else ""
            texts = _join([(left, node.left), (right, node.right)], sep)
            return V(texts, left.draws | right.draws)
        if isinstance(node, ast.Attribute):
            value = self.expr(node.value)
            kind = KINDS.get(self.name(node) or "")
            parent = {os.path.dirname(text) for text in value.texts if node.attr == "parent"}
            return V(frozenset(parent), value.draws | ({f"<{kind}>"} if kind else set()))
        if isinstance(node, ast.Subscript):  # `task['file']`, else what the container holds
            base, key = self.expr(node.value), self.expr(node.slice)
            field = None
            if isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Constant):
                field = self.s.texts.get(f"{node.value.id}[{node.slice.value!r}]")
            return V(base.texts if field is None else field, base.draws | key.draws)
        if isinstance(node, COMPREHENSIONS):  # its names bound for it alone
            saved, outer = (dict(self.s.texts), dict(self.s.flows)), self.context
            for generator in node.generators:
                self.bind(generator.target, self.expr(generator.iter))
                for test in generator.ifs:
                    self.context |= self.expr(test).draws
            key = self.expr(getattr(node, "key", None))
            value = self.expr(getattr(node, "elt", None) or getattr(node, "value", None))
            context, self.context = self.context, outer
            self.s.texts, self.s.flows = saved
            return V(value.texts, value.draws | key.draws | context)
        if isinstance(node, ast.NamedExpr):
            value = self.expr(node.value)
            self.bind(node.target, value)
            return value
        children = ast.iter_child_nodes(node)
        values = [self.expr(child) for child in children if isinstance(child, ast.expr)]
        texts = frozenset().union(*(value.texts for value in values))
        texts = frozenset(sorted(texts)[:MAX_TEXTS]) if isinstance(node, CONTAINERS) else EMPTY
        return V(texts, frozenset().union(*(value.draws for value in values)))

    def name(self, node: ast.expr) -> str | None:
        """A call's or attribute's dotted name through the session's imports; a method's
        own name where its object is no name."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return parts[0] if parts else None
        return ".".join([self.s.aliases.get(node.id, node.id), *reversed(parts)])

    def call(self, node: ast.Call) -> V:
        name = self.name(node.func) or ""
        method = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        receiver = self.expr(node.func.value if method else node.func)
        args = [self.expr(arg) for arg in node.args]
        keywords = {keyword.arg: self.expr(keyword.value) for keyword in node.keywords}
        draws = receiver.draws.union(*(value.draws for value in [*args, *keywords.values()]))
        kind = KINDS.get(name) or KINDS.get(method if method in METHODS else "")
        kind = None if name in self.s.flows else kind
        kind = "network" if name.split(".")[0] in NETWORK else kind
        if kind and (kind != "code_from_text" or not method):
            draws |= {f"<{kind}>"}
        texts = EMPTY
        if name in SHELL_CALLS and args:
            if isinstance(node.args[0], (ast.List, ast.Tuple)):  # an argv
                argv = [min(self.expr(item).texts, default="") for item in node.args[0].elts]
                args[0] = V(frozenset({shlex.join(argv)}))
            for text in sorted(args[0].texts)[:4]:
                draws |= self.shell(text)
        elif name == "os.chdir" and args and len(args[0].texts) == 1:
            self.s.cwd = os.path.normpath(os.path.join(self.s.cwd, *args[0].texts))
        elif name.split(".")[-1] == "open" and (args or receiver.texts):
            where = receiver if method == "open" and receiver.texts else args[0]
            modes = [*args[1 if where is not receiver else 0 :][:1], keywords.get("mode", NOTHING)]
            if any(set(text) & set("wax+") for mode in modes for text in mode.texts):
                self.use(where, write=True)
            texts = where.texts
        elif name in JOINS or method in JOINS:
            parts = [(receiver, node.func.value)] if method in JOINS and receiver.texts else []
            texts = _join(parts + list(zip(args, node.args, strict=True)), "/")
        elif (method in ("glob", "rglob") or name in ("glob.glob", "glob.iglob", "glob")) and args:
            path = method and name not in ("glob.glob", "glob.iglob")  # `Path(d).glob(p)`
            base = [(receiver, node.func.value)] if path else []
            texts = _join([*base, (args[0], node.args[0])], "/")
        elif method in WRITE_METHODS and receiver.texts:
            self.use(V(receiver.texts, draws), write=True)
        elif name in MOVES or (method in ("rename", "replace") and receiver.texts):
            source, target = (([receiver] if name not in MOVES else []) + args + [NOTHING] * 2)[:2]
            self.use(V(target.texts, draws | self.use(source)), write=True)
        elif name in DUMPS and len(args) > 1:
            self.use(V(args[1].texts, draws), write=True)
        elif name == "print" and "file" in keywords:
            self.use(V(keywords["file"].texts, draws), write=True)
        if method:
            self.changed(node.func.value, draws)
        if name in self.s.writes:  # a function of the session's: what its body names
            self.named |= {path for path in self.s.flows.get(name, ()) if not channel(path)}
            self.use(V(self.s.writes[name], draws), write=True)
        return V(texts, frozenset(draws))
