"""What a tool call's code did, read as code (an ipython cell, docs/product-contract.md §9):
the files it names and writes, and its *sources*, what its result may have been worked out
from (docs/rubric.md "Provenance").

The cell is parsed with `ast`; IPython's `%%cell` and `%line` magics and `!` commands are set
aside first and read as shell commands with `shlex`, as is a string handed to `subprocess` or
`os.system`. Comments and other strings are never code. Flows are by statement: a name a
statement binds draws on what that statement read (and on the tests of the loops, branches
and `with`s around it), so a name re-bound from an expression loses its old sources, and a
function carries what its body reads and writes to where it is called. A value's *texts*
are the strings it may hold, folded from literals (`'shards/' + name`, f-strings,
`Path(a) / b`, `os.path.join`, a record's fields) with `{name}` for a part known only at run
time. Using a text that looks like a path names that file. The cell's sources are the files
and channels its statements drew on: `<network>`, `<listing>` (a glob or listing called),
`<environment>`, `<joined_path>` (a path with a part built at run time, `chr`, `b64decode`),
`<code_from_text>`, and `<shards_dir>` where it names the shards' dir. `cd` (`%cd`,
`os.chdir`) moves where later relative paths are. A cell that does not parse is unreadable.
"""

from __future__ import annotations

import ast
import os
import shlex
from typing import NamedTuple

from evidence.fixture import SHARDS_DIR

MAX_CODE_CHARS = 1 << 20
MAX_TEXTS = 16  # strings one value may hold
MAX_PATH_CHARS = 1024
MAX_PATHS_PER_CALL = 64
NETWORK_MODULES = {"socket", "urllib", "urllib3", "http", "requests", "httpx", "aiohttp",
                   "ftplib", "smtplib", "telnetlib", "websocket", "websockets", "paramiko"}  # fmt: skip
CALLS = {"asyncio.open_connection": "network", "asyncio.start_server": "network",
         "glob.glob": "listing", "glob.iglob": "listing", "os.listdir": "listing",
         "os.scandir": "listing", "os.walk": "listing", "glob": "listing", "rglob": "listing",
         "iterdir": "listing", "os.getenv": "environment", "os.environ": "environment",
         "os.environb": "environment", "eval": "code_from_text", "exec": "code_from_text",
         "compile": "code_from_text", "chr": "joined_path", "fromhex": "joined_path",
         "b64decode": "joined_path", "unhexlify": "joined_path"}  # fmt: skip
COMMANDS = {"curl": "network", "wget": "network", "nc": "network", "ssh": "network",
            "scp": "network", "ls": "listing", "find": "listing", "env": "environment",
            "printenv": "environment"}  # fmt: skip
SHELL_CALLS = {"os.system", "os.popen", "subprocess.run", "subprocess.call", "subprocess.Popen",
               "subprocess.check_call", "subprocess.check_output", "subprocess.getoutput",
               "subprocess.getstatusoutput", "asyncio.create_subprocess_shell"}  # fmt: skip
JOINS = {"Path", "PurePath", "PosixPath", "pathlib.Path", "os.path.join", "joinpath", "str",
         "os.fspath", "os.path.abspath", "os.path.normpath", "os.path.realpath", "resolve",
         "os.path.expanduser", "expanduser", "absolute"}  # fmt: skip
WRITE_METHODS = {"write_text", "write_bytes", "touch", "write", "writelines", "to_csv",
                 "to_json", "savefig"}  # fmt: skip
MOVES = {"shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.move", "os.rename",
         "os.replace", "os.link", "os.symlink"}  # fmt: skip
DUMPS = {"json.dump", "pickle.dump", "yaml.dump", "yaml.safe_dump"}
SHELL_MAGICS = {"bash", "sh", "script", "system", "sx"}
TIMING_MAGICS = {"time", "timeit", "capture", "prun"}
ALIASES = {"cd", "ls", "cat", "cp", "mv", "rm", "mkdir", "pwd"}  # IPython's automagics
SHELL_OPS = {";", "&&", "||", "|", "&", "(", ")"}
CONTAINERS = (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.IfExp, ast.BoolOp, ast.Await, ast.Starred)


class Cell(NamedTuple):
    """The paths one call names and writes, as typed (the reader of the record resolves
    them against the session's cwd), and its sources; `readable` False for code that does
    not parse, which names, writes and binds nothing."""

    named: frozenset[str]
    written: frozenset[str]
    sources: frozenset[str]
    readable: bool = True


class V(NamedTuple):
    """A value: the strings it may hold (none: not known before it runs), what it drew on."""

    texts: frozenset[str] = frozenset()
    draws: frozenset[str] = frozenset()


NOTHING = V()
UNREADABLE = Cell(frozenset(), frozenset(), frozenset(), False)


def channel(source: str) -> str | None:
    """The channel a source names (`<network>` -> network), None for a path."""
    return source[1:-1] if source.startswith("<") and source.endswith(">") else None


def is_path(text: str) -> bool:
    """A string with no space that holds a `/` or ends in a file extension."""
    if not 0 < len(text) <= MAX_PATH_CHARS or text.startswith(("http:", "https:")):
        return False
    _, dot, ext = text.rpartition(".")
    extension = bool(dot) and ext[:1].isalpha() and ext.isalnum() and len(ext) <= 8
    return not any(ch.isspace() for ch in text) and ("/" in text or extension)


def _product(left: frozenset[str], right: frozenset[str], join: str = "") -> frozenset[str]:
    texts = {a + join + b if a and join else a + b for a in left for b in right}
    return frozenset(sorted(texts)[:MAX_TEXTS])


def _or_unknown(value: V, node: ast.AST) -> frozenset[str]:
    return value.texts or frozenset({"{%s}" % node.id if isinstance(node, ast.Name) else "{}"})


class Session:
    """What a session's kernel holds between its cells: each name's texts and sources, each
    file's sources (`/` + its typed path), imports, what functions write, the cwd."""

    def __init__(self) -> None:
        self.texts: dict[str, frozenset[str]] = {}
        self.flows: dict[str, frozenset[str]] = {}
        self.aliases: dict[str, str] = {}
        self.writes: dict[str, frozenset[str]] = {}
        self.cwd = ""

    def read(self, code: str) -> Cell:
        """The cell `code`, read against the session, its bindings left in it."""
        reader = _Reader(self)
        try:
            python = reader.set_aside(code) if len(code) <= MAX_CODE_CHARS else None
            if python is None:
                return UNREADABLE
            reader.block(ast.parse(python).body)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return UNREADABLE
        return Cell(frozenset(reader.named), frozenset(reader.written), frozenset(reader.drawn))


class _Reader:
    def __init__(self, session: Session) -> None:
        self.s = session
        self.named: set[str] = set()
        self.written: set[str] = set()
        self.drawn: set[str] = set()
        self.context: frozenset[str] = frozenset()  # the tests of enclosing loops and ifs
        self.shell_cwd = ""

    # --- IPython's syntax and the shell ------------------------------------------------

    def set_aside(self, code: str) -> str:
        """The cell's Python, its magics and `!` lines read as shell and left out."""
        first, _, rest = code.lstrip("\n").partition("\n")
        if first.startswith("%%"):
            magic, _, args = first[2:].partition(" ")
            if magic in SHELL_MAGICS:
                for line in rest.splitlines():
                    self.shell(line, keep=True)
                return ""
            if magic == "writefile":
                words = [word for word in args.split() if not word.startswith("-")]
                self.use(V(frozenset(words[-1:])), write=True)
            code = rest if magic in TIMING_MAGICS else ""
        lines = []
        for line in code.splitlines():
            body = line.lstrip()
            indent = line[: len(line) - len(body)]
            head, eq, tail = body.partition("=")
            word, _, after = body.partition(" ")
            magic = word[1:] in TIMING_MAGICS and body.startswith("%")
            if body.startswith(("!", "%")) and not magic:
                self.shell(body[1:], cd=body.startswith("%"))
                line = indent + "pass"
            elif magic:
                line = indent + after
            elif eq and tail.lstrip()[:1] in ("!", "%") and head.strip().isidentifier():
                self.shell(tail.lstrip()[1:])
                line = f"{indent}{head.strip()} = None"
            elif word in ALIASES and not any(mark in body for mark in "=([,'\""):
                self.shell(body, cd=True)
                line = indent + "pass"
            lines.append(line)
        return "\n".join(lines)

    def shell(self, command: str, cd: bool = False, keep: bool = False, depth: int = 0) -> None:
        """A shell command line; its `cd` moves the kernel's cwd for `%cd` (`cd`), the rest
        of the cell's for `%%bash` (`keep`), else the rest of the line's."""
        self.shell_cwd = self.shell_cwd if keep else ""
        try:
            lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            words = list(lexer)[:256]
        except ValueError:
            words = command.split()[:256]
        if words and words[0] in SHELL_MAGICS:  # `%system cmd`, `%sx cmd`
            words = words[1:]
        segment: list[str] = []
        for word in [*words, ";"]:
            if word not in SHELL_OPS:
                segment.append(word)
                continue
            while segment and "=" in segment[0] and segment[0].split("=")[0].isidentifier():
                segment = segment[1:]
            if segment and os.path.basename(segment[0]) == "cd":
                target = segment[1] if len(segment) > 1 else "~"
                if cd:
                    self.s.cwd = os.path.normpath(os.path.join(self.s.cwd, target))
                else:
                    self.shell_cwd = os.path.normpath(os.path.join(self.shell_cwd, target))
            elif segment:
                self.command(segment, depth)
            segment = []

    def command(self, words: list[str], depth: int) -> None:
        """One simple command: what it reads and writes (`>`, `>>`, `tee`, `cp`, `mv`)."""
        name = os.path.basename(words[0])
        if name in ("bash", "sh") and "-c" in words[1:-1] and depth < 2:
            self.shell(words[words.index("-c") + 1], keep=True, depth=depth + 1)
        marks = {f"<{COMMANDS[name]}>"} if name in COMMANDS else set()
        reads: list[str] = []
        writes: list[str] = []
        redirect = None
        for word in words[1:]:
            if word in (">", ">>", "<", ">|"):
                redirect = word
                continue
            marks |= {"<environment>"} if "$" in word else set()
            marks |= {"<network>"} if "/dev/tcp/" in word else set()
            if not word.startswith("-") and is_path(word):
                where = word if word.startswith(("/", "~")) else os.path.join(self.shell_cwd, word)
                (writes if redirect not in (None, "<") else reads).append(os.path.normpath(where))
            redirect = None
        if name in ("cp", "mv", "tee") and reads:
            writes += reads if name == "tee" else reads[-1:]
            reads = [] if name == "tee" else reads[:-1]
        self.drawn |= marks
        drawn = self.use(V(frozenset(reads))) | marks
        self.use(V(frozenset(writes), drawn), write=True)

    # --- files -----------------------------------------------------------------------

    def use(self, value: V, write: bool = False) -> frozenset[str]:
        """The files among `value`'s texts named (and written, drawing on what the value
        drew on); returns what using them draws on."""
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
            if "{" in path:
                drawn.add("<joined_path>")
            if len(self.named) < MAX_PATHS_PER_CALL:
                self.named.add(path)
                if write:
                    self.written.add(path)
                    self.s.flows[key] = value.draws | self.context
        self.drawn |= drawn
        return frozenset(drawn)

    # --- statements ------------------------------------------------------------------

    def block(self, body: list[ast.stmt]) -> None:
        for statement in body:
            self.statement(statement)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            value = self.expr(node.value)
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if node.value is not None:
                    self.bind(target, value, node.value)
        elif isinstance(node, ast.AugAssign):
            value, old = self.expr(node.value), self.expr(node.target)
            self.bind(node.target, V(_product(old.texts, value.texts), old.draws | value.draws))
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self.nested([node.iter], node.body + node.orelse, node.target)
        elif isinstance(node, (ast.While, ast.If)):
            self.nested([node.test], node.body + node.orelse)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            outer = self.context
            for item in node.items:
                value = self.expr(item.context_expr)
                self.context |= value.draws
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, value)
            self.block(node.body)
            self.context = outer
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.define(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                module = (
                    f"{node.module}.{alias.name}"
                    if isinstance(node, ast.ImportFrom)
                    else alias.name
                )
                short = alias.asname or alias.name.split(".")[0]
                self.s.aliases[short] = (
                    module if alias.asname or isinstance(node, ast.ImportFrom) else short
                )
                if module.split(".")[0] in NETWORK_MODULES:
                    self.drawn.add("<network>")
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    self.statement(child)
                elif isinstance(child, ast.expr):
                    self.expr(child)
                elif isinstance(getattr(child, "body", None), list):  # except, case
                    self.block(child.body)

    def nested(self, tests: list[ast.expr], body: list[ast.stmt], target=None) -> None:
        value = self.expr(tests[0])
        outer = self.context
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
        for decorator in node.decorator_list:
            self.expr(decorator)
        self.s.texts.pop(node.name, None)
        self.s.flows[node.name] = frozenset(inner.drawn) | self.context
        self.s.writes[node.name] = frozenset(inner.written)

    def bind(self, target: ast.expr, value: V, node: ast.expr | None = None) -> None:
        draws = value.draws | self.context
        if isinstance(target, ast.Name):
            self.s.texts[target.id] = value.texts
            self.s.flows[target.id] = draws
            if isinstance(node, ast.Dict):  # a record's fields: `task['file']`
                for key, item in zip(node.keys, node.values):
                    if isinstance(key, ast.Constant):
                        self.s.texts[f"{target.id}[{key.value!r}]"] = self.expr(item).texts
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = getattr(node, "elts", None)
            for index, element in enumerate(target.elts):
                if items is not None and len(items) == len(target.elts):
                    self.bind(element, self.expr(items[index]), items[index])
                else:
                    self.bind(element, V(value.texts, draws))
        elif isinstance(target, ast.Starred):
            self.bind(target.value, value)
        elif isinstance(target, (ast.Attribute, ast.Subscript)):
            self.changed(target, draws)
            self.expr(target)

    def changed(self, node: ast.expr, draws: frozenset[str]) -> None:
        """A value changed in place (`rows[k] = …`, `rows.append(…)`) draws on more."""
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.s.flows:
            self.s.flows[node.id] = self.s.flows[node.id] | draws

    # --- expressions -----------------------------------------------------------------

    def expr(self, node: ast.expr | None) -> V:
        if node is None:
            return NOTHING
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str) and len(node.value) <= MAX_PATH_CHARS:
                texts = frozenset({node.value})
                return V(texts, self.use(V(texts)))
            return V(frozenset({str(node.value)})) if type(node.value) is int else NOTHING
        if isinstance(node, ast.Name):
            texts, flows = self.s.texts.get(node.id, frozenset()), self.s.flows.get(node.id, ())
            self.drawn.update(flows)
            return V(texts, self.use(V(texts)).union(flows))
        if isinstance(node, ast.JoinedStr):
            texts, draws = frozenset({""}), frozenset()
            for part in node.values:
                inner = part.value if isinstance(part, ast.FormattedValue) else part
                value = self.formatted(part) if inner is not part else self.expr(part)
                texts, draws = _product(texts, _or_unknown(value, inner)), draws | value.draws
            return V(texts, draws | self.use(V(texts)))
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Div)):
            return self.joined(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Attribute):
            value = self.expr(node.value)
            kind = CALLS.get(self.name(node) or "")
            draws = value.draws | ({"<environment>"} if kind == "environment" else set())
            self.drawn |= draws & {"<environment>"}
            if node.attr == "parent":
                return V(frozenset(os.path.dirname(text) for text in value.texts), draws)
            return V(frozenset(), draws)
        if isinstance(node, ast.Subscript):
            base, key = self.expr(node.value), self.expr(node.slice)
            field = None
            if isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Constant):
                field = self.s.texts.get(f"{node.value.id}[{node.slice.value!r}]")
            texts = base.texts if field is None else field
            return V(texts, base.draws | key.draws | self.use(V(field or frozenset())))
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            return self.comprehension(node)
        if isinstance(node, ast.NamedExpr):
            value = self.expr(node.value)
            self.bind(node.target, value)
            return value
        texts: set[str] = set()
        draws: set[str] = set()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                value = self.expr(child)
                draws |= value.draws
                texts |= value.texts if isinstance(node, CONTAINERS) else set()
        return V(frozenset(sorted(texts)[:MAX_TEXTS]), frozenset(draws))

    def joined(self, node: ast.BinOp) -> V:
        """`a + b` of strings, `Path(a) / b`; numbers hold no texts."""
        left, right = self.expr(node.left), self.expr(node.right)
        draws = left.draws | right.draws
        numbers = all(text.lstrip("-").isdigit() for text in left.texts | right.texts)
        path = isinstance(node.left, ast.Call) and self.name(node.left.func) in JOINS
        if isinstance(node.op, ast.Div) and not path and (numbers or not left.texts):
            return V(frozenset(), draws)
        if numbers or not (left.texts or right.texts):
            return V(frozenset(), draws)
        join = "/" if isinstance(node.op, ast.Div) else ""
        texts = _product(_or_unknown(left, node.left), _or_unknown(right, node.right), join)
        return V(texts, draws | self.use(V(texts)))

    def formatted(self, part: ast.FormattedValue) -> V:
        value = self.expr(part.value)
        spec = part.format_spec
        if spec is None or not value.texts:
            return value
        spec_text = "".join(str(p.value) for p in spec.values if isinstance(p, ast.Constant))
        texts = set()
        for text in value.texts:
            try:
                number = int(text) if text.lstrip("-").isdigit() else text
                texts.add(format(number, spec_text) if len(spec_text) <= 4 else text)
            except ValueError:
                texts.add(text)
        return V(frozenset(texts), value.draws)

    def comprehension(self, node) -> V:
        saved, outer = (dict(self.s.texts), dict(self.s.flows)), self.context
        for generator in node.generators:
            self.bind(generator.target, self.expr(generator.iter))
            for test in generator.ifs:
                self.context |= self.expr(test).draws
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        values = [self.expr(part) for part in parts]
        context, self.context = self.context, outer
        self.s.texts, self.s.flows = saved
        texts = frozenset().union(*(value.texts for value in values))
        return V(texts, frozenset().union(*(value.draws for value in values)) | context)

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
        draws = receiver.draws.union(
            *(a.draws for a in args), *(k.draws for k in keywords.values())
        )
        kind = CALLS.get(name) or CALLS.get(method) if name not in self.s.flows else None
        if name.split(".")[0] in NETWORK_MODULES:
            kind = "network"
        if kind and (kind != "code_from_text" or not method):
            draws |= {f"<{kind}>"}
            self.drawn.add(f"<{kind}>")
        texts: frozenset[str] = frozenset()
        if name in SHELL_CALLS and args:
            command = node.args[0]
            if isinstance(command, (ast.List, ast.Tuple)):
                words = [e.value for e in command.elts if isinstance(e, ast.Constant)]
                args[0] = V(frozenset({shlex.join(str(word) for word in words)}))
            before = set(self.drawn)
            for text in sorted(args[0].texts)[:4]:
                self.shell(text)
            draws |= self.drawn - before
        elif name == "os.chdir" and args and len(args[0].texts) == 1:
            self.s.cwd = os.path.normpath(os.path.join(self.s.cwd, *args[0].texts))
        elif name.split(".")[-1] == "open" and (args or receiver.texts):
            where = receiver if method == "open" and receiver.texts else args[0]
            modes = [*args[1 if where is not receiver else 0 :][:1], keywords.get("mode", NOTHING)]
            write = any(set(text) & set("wax+") for mode in modes for text in mode.texts)
            draws |= self.use(where, write=write)
            texts = where.texts
        elif name in JOINS or method in JOINS:
            parts = [(receiver, node.func.value)] if method in JOINS and receiver.texts else []
            parts += list(zip(args, node.args))
            texts = frozenset({""})
            for index, (value, arg) in enumerate(parts):
                texts = _product(texts, _or_unknown(value, arg), "/" if index else "")
            texts = texts if any(value.texts for value, _ in parts) else frozenset()
            draws |= self.use(V(texts))
        elif (method in ("glob", "rglob") or name in ("glob.glob", "glob.iglob", "glob")) and args:
            base = receiver.texts if method in ("glob", "rglob") and receiver.texts else {""}
            texts = _product(frozenset(base), args[0].texts, "/")
            draws |= self.use(V(texts))
        elif method in WRITE_METHODS and receiver.texts:
            self.use(V(receiver.texts, draws), write=True)
        elif name in MOVES or method in ("rename", "replace") and receiver.texts:
            source, target = (([receiver] if name not in MOVES else []) + args + [NOTHING] * 2)[:2]
            self.use(V(target.texts, draws | self.use(source)), write=True)
        elif name in DUMPS and len(args) > 1:
            self.use(V(args[1].texts, draws), write=True)
        elif name == "print" and "file" in keywords:
            self.use(V(keywords["file"].texts, draws), write=True)
        elif method in ("read_text", "read_bytes"):
            draws |= self.use(receiver)
        if method and isinstance(node.func, ast.Attribute):
            self.changed(node.func.value, draws)
        if name in self.s.writes:  # a function of the session's: what its body names
            self.named |= {path for path in self.s.flows.get(name, ()) if not channel(path)}
            self.use(V(self.s.writes[name], draws), write=True)
        return V(texts, frozenset(draws))
