"""A recording model proxy: the runner's own witness of every model call.

Every file the scorer reads is one the agent could have written. The model traffic is not:
the runner serves this proxy from a thread of its own process, points the selected model's
provider at it in the run's agent home (shell/agent_config.py), and keeps what it saw in
memory until the agent's whole process tree is gone (contract §10 "Endpoint cross-check").

    with RecordingProxy({"anthropic": "https://api.anthropic.com"}) as proxy:
        config, upstream = models_json_override(user_models, "anthropic", proxy.url("anthropic"))
        ...                                   # run the agent; then, once it is gone:
        proxy.write_jsonl(path)

A request to `/<route>/<rest>?<query>` goes to `<upstream of route>/<rest>?<query>` with its
method, body and headers (hop-by-hop headers dropped, Host set for the upstream, and
`Accept-Encoding: identity` so the proxy can read the stream it relays); the response comes
back as it arrives, each piece written on as soon as it is read, status and headers unchanged
but for hop-by-hop ones. The product appends its API's path to the provider's base URL (the
OpenAI SDK `/chat/completions` and `/responses`, the Anthropic SDK `/v1/messages`, codex
`/codex/responses`), so the route stands in for the whole base URL, `/v1` or not.

Per request the proxy records a `ModelCall`: when, which session (`Conversation log: <path>`
in the system prompt, contract §9) at which depth, the response id and usage the upstream
reported, status, latency and sizes. Headers, keys, the query string and the bodies
themselves are never kept.

Product facts are from prime-agent v0.8.0's source (the commit the contract names); file
names are relative to the product repository.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import itertools
import json
import os
import re
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OPENAI_COMPLETIONS = "openai-completions"
OPENAI_RESPONSES = "openai-responses"
ANTHROPIC_MESSAGES = "anthropic-messages"


# The product's system prompt (core/prompts/rlm.ts) and a child's task (core/agent-session.ts).
CONVERSATION_LOG = re.compile(r"^Conversation log: (?P<path>.+?)[ \t]*$", re.MULTILINE)
DEPTH = re.compile(r"^Recursive agent depth: (?P<depth>\d+)", re.MULTILINE)
TASK_FROM_PARENT = "[task from parent]"

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Request headers the proxy sets itself: the body is read whole before it is forwarded.
REPLACED_REQUEST_HEADERS = frozenset({"host", "content-length", "expect", "accept-encoding"})
RELAY_PIECE = 64 * 1024  # at most this much per read from the upstream
MAX_EVENT_BYTES = 4 * 1024 * 1024  # an SSE event or JSON body larger than this is not parsed
DEFAULT_READ_TIMEOUT_S = 600.0  # a silence this long from the upstream ends the response
DEFAULT_CONNECT_TIMEOUT_S = 30.0
CLIENT_IDLE_TIMEOUT_S = 300.0  # an idle keep-alive connection from the product is closed
SHUTDOWN_POLL_S = 0.01  # how soon stop() returns (the serving loop looks this often)
STOP_WAIT_S = 5.0  # how long stop() waits for requests in flight once their sockets are shut

# ModelCall.error codes.
UNKNOWN_ROUTE = "unknown_route"  # the path names no route; answered 404
BAD_REQUEST = "bad_request"  # the request's body could not be read; answered 400
UPGRADE_REFUSED = "upgrade_refused"  # a WebSocket upgrade (codex tries one); answered 501
UPSTREAM_UNREACHABLE = "upstream_unreachable"  # no connection; answered 502
UPSTREAM_TIMEOUT = "upstream_timeout"  # no answer, or a stall, within the read timeout
UPSTREAM_RESET = "upstream_reset"  # the upstream closed or broke the connection early
CLIENT_GONE = "client_gone"  # the product stopped reading; the upstream call is dropped
FOREIGN_CALLER = (
    "foreign_caller"  # not a process of the product's (swarm_fanout/shell/callers.py); answered 403
)
PROXY_ERROR = "proxy_error"  # a fault of the proxy's own while relaying


@dataclass(frozen=True)
class ModelCall:
    """One request through the proxy. Times: `started` in epoch seconds, `first_byte_s` (the
    response's status line relayed) and `ended_s` (its last byte) in seconds after it."""

    seq: int
    route: str
    method: str
    path: str  # without the query string, which may carry a key
    api: str | None  # by the path: OPENAI_COMPLETIONS, OPENAI_RESPONSES or ANTHROPIC_MESSAGES
    model: str | None
    started: float
    first_byte_s: float | None
    ended_s: float
    status: int | None  # what the product received; None if it received nothing
    session: str | None  # `Conversation log: <path>` of the system prompt
    depth: int | None  # `Recursive agent depth: N`
    response_id: str | None
    usage: dict | None  # as the API reported it
    bytes_in: int
    bytes_out: int
    error: str | None
    injected: bool
    # The process that made the call, when the runner tells them apart (shell/callers.py).
    caller: dict | None = None

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RequestFacts:
    """What the proxy reads from a request body, never kept whole."""

    model: str | None = None
    session: str | None = None
    depth: int | None = None
    task: str | None = None  # a child's task: its first user message `[task from parent]…`


def api_of(path: str) -> str | None:
    """The API a request path belongs to, by the suffix the product's SDKs append."""
    path = path.rstrip("/")
    if path.endswith("/chat/completions"):
        return OPENAI_COMPLETIONS
    if path.endswith("/responses"):
        return OPENAI_RESPONSES
    if path.endswith("/messages"):
        return ANTHROPIC_MESSAGES
    return None


def _text(content: object) -> str:
    """A message's text: a string, or the `text` of its parts (`text`, `input_text` parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def request_facts(body: bytes) -> RequestFacts:
    """Model, session, depth and task of a request body of any of the three APIs.

    The system prompt is the `system` field (anthropic-messages, packages/ai/src/providers/
    anthropic.ts), or the first `system`/`developer` message of `messages` (chat) or `input`
    (responses; `instructions` as well, which codex uses)."""
    try:
        request = json.loads(body)
    except (ValueError, RecursionError):
        return RequestFacts()
    if not isinstance(request, dict):
        return RequestFacts()
    conversation = request.get("messages")
    if not isinstance(conversation, list):
        conversation = request.get("input")
    if not isinstance(conversation, list):
        conversation = []
    messages = [m for m in conversation if isinstance(m, dict)]
    system = _text(request.get("system")) + "\n" + _text(request.get("instructions"))
    first_system = next((m for m in messages if m.get("role") in ("system", "developer")), None)
    if first_system is not None:
        system += "\n" + _text(first_system.get("content"))
    users = (_text(m.get("content")) for m in messages if m.get("role") == "user")
    log, depth = CONVERSATION_LOG.search(system), DEPTH.search(system)
    model = request.get("model")
    return RequestFacts(
        model=model if isinstance(model, str) else None,
        session=log.group("path") if log else None,
        depth=int(depth.group("depth")) if depth else None,
        task=next((text for text in users if text.startswith(TASK_FROM_PARENT)), None),
    )


class ResponseReader:
    """Reads the response id and usage from a body as it is relayed, piece by piece.

    Where each API puts them, and what the product takes (packages/ai/src/providers/):
    - openai-completions: every chunk's top-level `id` (`responseId ||= chunk.id`), `usage` in
      the final chunk (openai-completions.ts);
    - openai-responses: `response.id` of `response.created` and `response.completed`, the
      latter's `response.usage` (openai-responses-shared.ts);
    - anthropic-messages: `message.id` and `message.usage` of `message_start`, then the
      non-null fields of `message_delta`'s `usage` (anthropic.ts).
    A JSON body (no stream) has `id` and `usage` at the top in all three."""

    def __init__(self, content_type: str):
        self.sse = content_type.startswith("text/event-stream")
        self.json = not self.sse and "json" in content_type
        self.response_id: str | None = None
        self.usage: dict | None = None
        self._pending = bytearray()  # an unfinished line (SSE) or the body so far (JSON)
        self._data: list[bytes] = []  # the current SSE event's data lines
        self._skipping = False  # the current SSE event outgrew MAX_EVENT_BYTES

    def feed(self, piece: bytes) -> None:
        if self.json:
            if len(self._pending) + len(piece) <= MAX_EVENT_BYTES:
                self._pending += piece
            else:
                self.json = False
            return
        if not self.sse:
            return
        self._pending += piece
        start = 0
        while (end := self._pending.find(b"\n", start)) >= 0:
            self._line(bytes(self._pending[start:end]).rstrip(b"\r"))
            start = end + 1
        del self._pending[:start]
        if len(self._pending) > MAX_EVENT_BYTES:
            self._pending.clear()
            self._skipping = True

    def finish(self) -> None:
        if self.json:
            self._event(bytes(self._pending))
        elif self.sse:
            self.feed(b"\n\n")

    def _line(self, line: bytes) -> None:
        if not line:
            if self._data and not self._skipping:
                self._event(b"\n".join(self._data))
            self._data.clear()
            self._skipping = False
        elif line.startswith(b"data:") and not self._skipping:
            self._data.append(line[6:] if line[5:6] == b" " else line[5:])
            if sum(map(len, self._data)) > MAX_EVENT_BYTES:
                self._data.clear()
                self._skipping = True

    def _event(self, data: bytes) -> None:
        # Once the id is known, only an event that can carry usage is worth decoding.
        if self.response_id is not None and b"usage" not in data:
            return
        try:
            event = json.loads(data)
        except ValueError:  # `[DONE]`, or not JSON
            return
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if isinstance(kind, str) and kind.startswith("response."):
            self._note(event.get("response"))
        elif kind == "message_start":
            self._note(event.get("message"))
        elif kind == "message_delta":
            delta = event.get("usage")
            if isinstance(delta, dict):
                usage = dict(self.usage or {})
                usage.update((key, value) for key, value in delta.items() if value is not None)
                self.usage = usage
        elif kind in (None, "message"):  # a chat chunk, or a JSON body
            self._note(event)

    def _note(self, holder: object) -> None:
        if not isinstance(holder, dict):
            return
        if self.response_id is None and isinstance(holder.get("id"), str) and holder["id"]:
            self.response_id = holder["id"]
        if isinstance(holder.get("usage"), dict):
            self.usage = holder["usage"]


def error_body(api: str | None, status: int, message: str) -> bytes:
    """An error in the API's own shape: Anthropic's `{type:"error", error:{type, message}}`
    (529 is its overload status), else OpenAI's `{error:{message, type, code}}`."""
    if api == ANTHROPIC_MESSAGES:
        kind = "overloaded_error" if status == 529 else "api_error"
        body: dict = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        kind = "server_error" if status >= 500 else "invalid_request_error"
        body = {"error": {"message": message, "type": kind, "code": None}}
    return json.dumps(body).encode()


@functools.lru_cache(maxsize=256)
def _naming(worker: str) -> re.Pattern:
    """`worker` as a whole name: `worker-1` is not named by `worker-10`."""
    return re.compile(r"(?<![\w-])" + re.escape(worker) + r"(?![\w-])")


class Upstream:
    """Where a route goes: scheme, host, port and base path of its upstream URL."""

    def __init__(self, base_url: str):
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"upstream {base_url!r} is not an http(s) URL")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.netloc = parts.netloc.rpartition("@")[2]
        self.path = parts.path.rstrip("/")

    @property
    def key(self) -> tuple:
        return (self.https, self.host, self.port)


class RecordingProxy:
    """The proxy server, on an ephemeral 127.0.0.1 port, served from a daemon thread.

    `routes` maps a route name (the first path segment) to its upstream base URL."""

    def __init__(
        self,
        routes: dict[str, str],
        *,
        read_timeout: float = DEFAULT_READ_TIMEOUT_S,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
    ):
        self.routes = {name: Upstream(url) for name, url in routes.items()}
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)  # notified as each request ends
        self._active = 0  # requests begun and not yet recorded
        self._seq = itertools.count(1)
        self._records: list[ModelCall] = []
        self._injections: dict[str, list[int]] = {}  # worker -> [requests left, status]
        self._idle: dict[tuple, list[http.client.HTTPConnection]] = {}
        self._open: set[socket.socket] = set()  # client and upstream sockets in use
        self._ssl_context: ssl.SSLContext | None = None  # made at the first https upstream
        self._server = _Server(self)
        self._servers = [self._server]
        self._threads = [self._serving(self._server)]
        self.callers = None  # callers.RunProcesses, once the agent's processes are known

    def _serving(self, server: _Server) -> threading.Thread:
        return threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": SHUTDOWN_POLL_S},
            name="recording-proxy",
            daemon=True,
        )

    def serve(self, listener: socket.socket) -> None:
        """Serve a listening socket made elsewhere too: the sandbox's (shell/sandbox.py), bound on
        its own loopback at this proxy's port, so `url()` is the same inside."""
        server = _Server(self, listener)
        thread = self._serving(server)
        with self._lock:
            self._servers.append(server)
            self._threads.append(thread)
        thread.start()

    def attribute(self, callers) -> None:
        """From now on, judge the caller of each new connection (callers.RunProcesses) and
        refuse one that is not the product's own process."""
        self.callers = callers

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def url(self, route: str) -> str:
        """The base URL the product should use for `route`."""
        return f"http://127.0.0.1:{self.port}/{route}"

    def start(self) -> RecordingProxy:
        self._threads[0].start()
        return self

    def stop(self) -> None:
        """Stops serving, breaks every connection still open, and returns once each request
        in flight has been recorded: after it, `records()` is final."""
        for server, thread in zip(self._servers, self._threads, strict=True):
            if thread.is_alive():
                server.shutdown()
                thread.join()
            server.server_close()
        with self._lock:
            sockets, self._open = list(self._open), set()
            idle, self._idle = [c for cs in self._idle.values() for c in cs], {}
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for connection in idle:
            connection.close()
        with self._settled:
            self._settled.wait_for(lambda: self._active == 0, timeout=STOP_WAIT_S)

    def __enter__(self) -> RecordingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- what the runner reads -----------------------------------------------------------

    def records(self) -> list[ModelCall]:
        """Every finished request so far, in arrival order. A request is recorded just after
        its last byte is relayed: only after `stop()` is the list sure to be complete."""
        with self._lock:
            return sorted(self._records, key=lambda call: call.seq)

    def write_jsonl(self, path: str) -> None:
        """One `ModelCall.to_json()` a line, written whole or not at all."""
        temporary = path + ".tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            for call in self.records():
                handle.write(json.dumps(call.to_json(), ensure_ascii=False) + "\n")
        os.replace(temporary, path)

    def inject_failures(self, worker: str, count: int, status: int = 500) -> None:
        """The next `count` requests of a child (depth >= 1) whose task names `worker` are
        answered by the proxy with `status` and an error body of the API's shape; the
        product's SDK retries count as requests too (contract §5 "Retries")."""
        if count < 1 or not 400 <= status <= 599:
            raise ValueError(f"count must be >= 1 and status an HTTP error, not {count}, {status}")
        with self._lock:
            self._injections[worker] = [count, status]

    # --- used by the handler -------------------------------------------------------------

    def _begin(self) -> int:
        """A request arrived: its sequence number."""
        with self._lock:
            self._active += 1
            return next(self._seq)

    def _record(self, call: ModelCall) -> None:
        with self._lock:
            self._records.append(call)
            self._active -= 1
            self._settled.notify_all()

    def _take_injection(self, facts: RequestFacts) -> int | None:
        if facts.depth is None or facts.depth < 1 or facts.task is None:
            return None
        with self._lock:
            for worker, pending in self._injections.items():
                if pending[0] > 0 and _naming(worker).search(facts.task):
                    pending[0] -= 1
                    return pending[1]
        return None

    def _track(self, sock: socket.socket | None, is_open: bool) -> None:
        if sock is None:
            return
        with self._lock:
            if is_open:
                self._open.add(sock)
            else:
                self._open.discard(sock)

    def _ssl(self) -> ssl.SSLContext:
        """The default SSL context, made once and only when an https upstream needs it
        (loading the system's certificates costs 20 ms, a scripted run needs none)."""
        with self._lock:
            if self._ssl_context is None:
                self._ssl_context = ssl.create_default_context()
            return self._ssl_context

    def _connection(self, upstream: Upstream) -> tuple[http.client.HTTPConnection, bool]:
        """An idle kept-alive connection to the upstream, else a new one; and whether it
        was reused."""
        with self._lock:
            idle = self._idle.get(upstream.key)
            if idle:
                return idle.pop(), True
        if upstream.https:
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                upstream.host, upstream.port, timeout=self.connect_timeout, context=self._ssl()
            )
        else:
            connection = http.client.HTTPConnection(
                upstream.host, upstream.port, timeout=self.connect_timeout
            )
        connection.connect()
        connection.sock.settimeout(self.read_timeout)
        return connection, False

    def _done(self, exchange: _Exchange, reusable: bool) -> None:
        """Puts the exchange's connection back for the next request, or closes it."""
        self._track(exchange.sock, False)
        exchange.response.close()
        if reusable and not exchange.response.will_close:
            with self._lock:
                self._idle.setdefault(exchange.upstream.key, []).append(exchange.connection)
        else:
            exchange.connection.close()
            exchange.sock.close()

    def _send(
        self, upstream: Upstream, method: str, target: str, headers: list, body: bytes
    ) -> _Exchange:
        """The upstream's response to the request. A kept-alive connection the upstream
        closed while idle fails before any answer: then the request goes once more, on a
        new connection."""
        for attempt in range(2):
            connection, reused = self._connection(upstream)
            sock = connection.sock
            self._track(sock, True)
            try:
                connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
                for name, value in headers:
                    connection.putheader(name, value)
                connection.endheaders(body)
                response = connection.getresponse()
            except BaseException as error:
                self._track(sock, False)
                connection.close()
                if reused and attempt == 0 and isinstance(error, ConnectionError):
                    continue
                raise
            return _Exchange(upstream, connection, sock, response)
        raise AssertionError("unreachable")


@dataclass(frozen=True)
class _Exchange:
    """One request sent upstream: its connection, that connection's socket (the response
    holds it alone once the upstream says it will close) and the response."""

    upstream: Upstream
    connection: http.client.HTTPConnection
    sock: socket.socket
    response: http.client.HTTPResponse


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # A thousand children may call at once (socketserver's default backlog is 5).
    request_queue_size = 1024

    def __init__(self, proxy: RecordingProxy, listener: socket.socket | None = None):
        super().__init__(("127.0.0.1", 0), _Handler, bind_and_activate=listener is None)
        if listener is not None:
            self.socket.close()
            self.socket = listener
            self.server_address = listener.getsockname()
        self.proxy = proxy


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and chunked replies
    disable_nagle_algorithm = True  # each relayed piece leaves at once
    timeout = CLIENT_IDLE_TIMEOUT_S
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        """The proxy's record is its log; nothing goes to stderr."""

    def setup(self) -> None:
        super().setup()
        self.server.proxy._track(self.connection, True)
        # Who is at the other end, asked while it still holds the connection (shell/callers.py).
        callers = self.server.proxy.callers
        self.caller = callers.identify(self.connection) if callers is not None else None

    def finish(self) -> None:
        self.server.proxy._track(self.connection, False)
        super().finish()

    def do_GET(self) -> None:
        self._proxy()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _proxy(self) -> None:
        proxy = self.server.proxy
        seq, started, clock = proxy._begin(), time.time(), time.perf_counter()
        target = self.path.partition("?")[0]
        call = {
            "seq": seq, "route": target.lstrip("/").partition("/")[0], "method": self.command,
            "path": target, "api": api_of(target), "model": None, "started": round(started, 6),
            "first_byte_s": None, "status": None, "session": None, "depth": None,
            "response_id": None, "usage": None, "bytes_in": 0, "bytes_out": 0, "error": None,
            "injected": False, "caller": self.caller.to_json() if self.caller else None,
        }  # fmt: skip
        try:
            self._serve(call, clock)
        except Exception:
            self.close_connection = True
            call["error"] = PROXY_ERROR
        finally:
            call["ended_s"] = round(time.perf_counter() - clock, 6)
            proxy._record(ModelCall(**call))

    def _serve(self, call: dict, clock: float) -> None:
        """Answers one request, noting what the record needs in `call`."""
        proxy = self.server.proxy
        try:
            body = self._read_body()
        except (OSError, ValueError):
            self.close_connection = True
            return self._own(call, clock, 400, BAD_REQUEST, "unreadable request body")
        facts = request_facts(body) if body else RequestFacts()
        call.update(bytes_in=len(body), model=facts.model, session=facts.session, depth=facts.depth)
        if self.caller is not None and not self.caller.product:
            self.close_connection = True
            return self._own(call, clock, 403, FOREIGN_CALLER, "not a process of the product's")
        upstream = proxy.routes.get(call["route"])
        if upstream is None:
            return self._own(call, clock, 404, UNKNOWN_ROUTE, f"no route {call['route']!r}")
        if "upgrade" in self.headers:
            self.close_connection = True
            return self._own(call, clock, 501, UPGRADE_REFUSED, "no protocol upgrades")
        status = proxy._take_injection(facts)
        if status is not None:
            call["injected"] = True
            return self._own(call, clock, status, None, "injected failure")
        target, _, query = self.path.partition("?")
        rest = "/" + target.lstrip("/").partition("/")[2]
        path = upstream.path + rest + ("?" + query if query else "")
        headers = self._upstream_headers(upstream, len(body))
        try:
            exchange = proxy._send(upstream, self.command, path, headers, body)
        except TimeoutError:
            return self._own(call, clock, 502, UPSTREAM_TIMEOUT, "upstream timed out")
        except (OSError, http.client.HTTPException) as error:
            code = UPSTREAM_RESET if _is_reset(error) else UPSTREAM_UNREACHABLE
            return self._own(call, clock, 502, code, f"{code}: {type(error).__name__}")
        error: str | None = PROXY_ERROR  # unless the relay ends, a fault of the proxy's own
        try:
            error = self._relay(exchange.response, call, clock)
        except OSError:  # writing to the product failed
            error = CLIENT_GONE
        finally:
            call["error"] = error
            if error is not None:
                self.close_connection = True
            proxy._done(exchange, reusable=error is None)

    def _own(self, call: dict, clock: float, status: int, code: str | None, message: str) -> None:
        """Answers with an error of the proxy's own, in the API's shape."""
        prefix = "" if code is None else "proxy: "
        call.update(status=status, error=code, first_byte_s=round(time.perf_counter() - clock, 6))
        body = error_body(call["api"], status, prefix + message)
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            self.close_connection = True
            call["error"] = code or CLIENT_GONE

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            pieces = []
            while size := int(self.rfile.readline(1024).split(b";")[0], 16):
                pieces.append(self._read_exactly(size))
                self.rfile.readline(1024)
            while self.rfile.readline(64 * 1024).strip():  # trailers
                pass
            return b"".join(pieces)
        return self._read_exactly(int(self.headers.get("Content-Length") or 0))

    def _read_exactly(self, size: int) -> bytes:
        data = self.rfile.read(size)
        if len(data) != size:
            raise ValueError("the request body ended early")
        return data

    def _upstream_headers(self, upstream: Upstream, length: int) -> list[tuple[str, str]]:
        named = _connection_named(self.headers.get_all("Connection") or [])
        headers = [
            (name, value)
            for name, value in self.headers.items()
            if name.lower() not in HOP_BY_HOP | REPLACED_REQUEST_HEADERS | named
        ]
        headers += [("Host", upstream.netloc), ("Accept-Encoding", "identity")]
        if length or self.command in ("POST", "PUT", "PATCH"):
            headers.append(("Content-Length", str(length)))
        return headers

    def _relay(self, response: http.client.HTTPResponse, call: dict, clock: float) -> str | None:
        """Writes the upstream's response on as it arrives; returns an error code, or None.
        A response cut short ends without its final chunk, and the connection closes, so
        the product cannot take it for a whole one."""
        named = _connection_named(response.headers.get_all("Connection") or [])
        headers = [
            (name, value)
            for name, value in response.getheaders()
            if name.lower() not in HOP_BY_HOP | named
            and not (response.chunked and name.lower() == "content-length")
        ]
        has_body = not (
            self.command == "HEAD" or response.status in (204, 304) or response.status < 200
        )
        chunked = has_body and response.length is None and self.request_version == "HTTP/1.1"
        if has_body and response.length is None and not chunked:
            self.close_connection = True  # an HTTP/1.0 client: the end of the body is the close
        self.send_response_only(response.status, response.reason)
        for name, value in headers:
            self.send_header(name, value)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        call.update(status=response.status, first_byte_s=round(time.perf_counter() - clock, 6))
        reader = ResponseReader(
            (response.getheader("Content-Type") or "").lower() if response.status < 400 else ""
        )
        error = None
        while has_body:
            try:
                piece = response.read1(RELAY_PIECE)
            except TimeoutError:
                error = UPSTREAM_TIMEOUT
                break
            except (OSError, http.client.HTTPException):
                error = UPSTREAM_RESET
                break
            if not piece:
                if response.length:  # fewer bytes than its Content-Length said
                    error = UPSTREAM_RESET
                break
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            call["bytes_out"] += len(piece)
            reader.feed(piece)
        if error is None and chunked:
            self.wfile.write(b"0\r\n\r\n")
        reader.finish()
        call.update(response_id=reader.response_id, usage=reader.usage)
        return error


def _connection_named(values: list[str]) -> frozenset[str]:
    """Header names a `Connection` header lists: hop-by-hop for this hop alone."""
    return frozenset(
        name.strip().lower() for value in values for name in value.split(",") if name.strip()
    )


def _is_reset(error: BaseException) -> bool:
    return isinstance(
        error,
        (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected,
         http.client.BadStatusLine, http.client.IncompleteRead),
    )  # fmt: skip
