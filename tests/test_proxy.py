"""The recording proxy relays model calls unchanged and records what it saw (shell/proxy.py).

Upstreams are the scripted model (scripted/model.py, the harness's OpenAI-compatible fake)
and small hand-written servers on 127.0.0.1 that answer in the shapes the product's SDKs
read (packages/ai/src/providers/ of prime-agent v0.8.0): OpenAI chat chunks, Responses API
events, Anthropic Messages events, and their JSON bodies. Requests carry the product's system
prompt lines (`Conversation log: <path>`, `Recursive agent depth: N`) and a child's task
(`[task from parent]…`), contract §9.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import socket
import struct
import tempfile
import threading
import unittest
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from swarm_fanout.scripted.model import ScriptedModelHandler, ScriptedModelServer
from swarm_fanout.shell import agent_config, proxy
from swarm_fanout.shell.agent_config import models_json_override
from swarm_fanout.shell.proxy import RecordingProxy
from tests import temp_dir

SECRET = "sk-test-SECRET"
ROOT_LOG = "/runs/r1/sessions/01a236e9-5025-7768-b8a6-526c5f07cf93.jsonl"
CHILD_LOG = "/runs/r1/session-artifacts/01a236e9/sub-0433f012/01a23678-6443.jsonl"
WAIT_S = 10.0  # a bound on waits that a working proxy ends at once


# --- requests in the product's shapes ------------------------------------------------------------


def system_prompt(log: str, depth: int) -> str:
    prompt = (
        "You are a general purpose agent that uses code to solve tasks.\n\n"
        f"Working directory: /runs/r1/repo\nConversation log: {log}\n"
        f"Recursive agent depth: {depth}\nPre-installed Python packages: numpy.\n"
    )
    if depth:
        prompt += "\nYou are a child agent spawned by 01a236e9. Task prompts are labeled.\n"
    return prompt


def task(worker: str) -> str:
    return f"[task from parent]\n\nAnswer for `shards/{worker}.jsonl` | worker `{worker}`."


def chat_request(log: str = ROOT_LOG, depth: int = 0, first_user: str = "Fan out.", **extra):
    messages = [
        {"role": "system", "content": system_prompt(log, depth)},
        {"role": "user", "content": [{"type": "text", "text": first_user}]},
    ]
    return {"model": "fanout", "messages": messages, "stream": True, **extra}


def child_request(worker: str, **extra) -> dict:
    return chat_request(CHILD_LOG, 1, task(worker), **extra)


def anthropic_request(log: str = CHILD_LOG, depth: int = 1, first_user: str = "") -> dict:
    system = [{"type": "text", "text": system_prompt(log, depth)}]
    user = {"role": "user", "content": [{"type": "text", "text": first_user or task("w-1")}]}
    return {"model": "claude", "system": system, "messages": [user], "stream": True}


def responses_request(log: str = ROOT_LOG, depth: int = 0) -> dict:
    system = {"role": "developer", "content": system_prompt(log, depth)}
    user = {"role": "user", "content": [{"type": "input_text", "text": "Fan out."}]}
    return {"model": "gpt", "input": [system, user], "stream": True}


def post(
    port: int, path: str, payload: dict | bytes, headers: dict | None = None
) -> tuple[int, dict, bytes]:
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_S)
    try:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        client.request("POST", path, data, {"Content-Type": "application/json", **(headers or {})})
        response = client.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        client.close()


# --- upstreams -----------------------------------------------------------------------------------


class TappedModelHandler(ScriptedModelHandler):
    """The scripted model, keeping each body it sends."""

    def send_body(self, status: int, content_type: str, data: bytes) -> None:
        self.server.sent.append(data)
        super().send_body(status, content_type, data)


def sse(*events: dict, named: bool = False) -> list[bytes]:
    """One SSE event a piece; `named` adds the `event:` line Anthropic and Responses send."""
    return [
        (f"event: {event['type']}\n" if named else "").encode()
        + f"data: {json.dumps(event)}\n\n".encode()
        for event in events
    ]


def chat_chunk(delta: dict | None, usage: dict | None = None) -> dict:
    chunk: dict = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": []}
    if delta is not None:
        chunk["choices"] = [{"index": 0, "delta": delta}]
    if usage is not None:
        chunk["usage"] = usage
    return chunk


CHAT_USAGE = {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}
RESPONSES_USAGE = {"input_tokens": 21, "output_tokens": 3, "total_tokens": 24}
ANTHROPIC_START_USAGE = {"input_tokens": 31, "output_tokens": 1, "cache_read_input_tokens": 5}
CHAT_SSE = [
    *sse(
        chat_chunk({"role": "assistant"}),
        chat_chunk({"content": "Hi"}),
        chat_chunk(None, CHAT_USAGE),
    ),
    b"data: [DONE]\n\n",
]
RESPONSES_SSE = sse(
    {"type": "response.created", "response": {"id": "resp_1", "usage": None}},
    {"type": "response.output_text.delta", "item_id": "msg_9", "delta": "Hi"},
    {"type": "response.completed", "response": {"id": "resp_1", "usage": RESPONSES_USAGE}},
    named=True,
)
ANTHROPIC_SSE = sse(
    {"type": "message_start", "message": {"id": "msg_1", "usage": ANTHROPIC_START_USAGE}},
    {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "Hi"}},
    {"type": "message_delta", "usage": {"output_tokens": 4, "input_tokens": None}},
    {"type": "message_stop"},
    named=True,
)
CHAT_JSON = {"id": "chatcmpl-2", "object": "chat.completion", "usage": {"prompt_tokens": 5}}
RESPONSES_JSON = {"id": "resp_2", "object": "response", "usage": {"input_tokens": 7}}
ANTHROPIC_JSON = {"id": "msg_2", "type": "message", "usage": {"input_tokens": 9}}


class Canned:
    """A hand-written upstream on 127.0.0.1: `reply(handler)` answers every request. Each
    request's method, path, headers, body and client port are kept in `seen`; `release` is
    set on exit, so a reply that waits on it ends."""

    def __init__(self, reply: Callable[[BaseHTTPRequestHandler], None]):
        self.seen: list[dict] = []
        self.release = threading.Event()
        canned = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                canned.seen.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "headers": list(self.headers.items()),
                        "body": self.rfile.read(length),
                        "port": self.client_address[1],
                    }
                )
                reply(self)

            do_GET = do_POST

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/base"

    def __enter__(self) -> Canned:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def send_chunked(handler, pieces, headers=(), end=True):
    """The headers of a streamed reply and `pieces` as chunks; `end`: the last chunk too."""
    handler.send_response_only(200)
    for name, value in (("Content-Type", "text/event-stream"), *headers):
        handler.send_header(name, value)
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    for piece in pieces:
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
    if end:
        handler.wfile.write(b"0\r\n\r\n")


def send_whole(handler, body: bytes, status=200, content_type="application/json", headers=()):
    handler.send_response_only(status)
    for name, value in (
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        *headers,
    ):
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)


class ProxyTest(unittest.TestCase):
    def serve(self, reply, read_timeout: float = WAIT_S) -> tuple[Canned, RecordingProxy]:
        """A canned upstream behind a proxy whose route `up` goes to it; both stop on cleanup,
        the proxy first, so its records are final when the test reads them after `stop`."""
        upstream = Canned(reply).__enter__()
        self.addCleanup(upstream.__exit__)
        recorder = RecordingProxy({"up": upstream.url}, read_timeout=read_timeout).start()
        self.addCleanup(recorder.stop)
        return upstream, recorder

    def only_record(self, recorder: RecordingProxy) -> proxy.ModelCall:
        recorder.stop()
        records = recorder.records()
        self.assertEqual(len(records), 1, records)
        return records[0]


# --- the scripted model behind the proxy --------------------------------------------------------


class ScriptedUpstreamTest(unittest.TestCase):
    def setUp(self) -> None:
        self.log = os.path.join(temp_dir(self), "model-log.jsonl")
        self.model = ScriptedModelServer(self.log)
        self.model.RequestHandlerClass = TappedModelHandler
        self.model.sent = []
        self.model.start()
        self.addCleanup(self.model.stop)
        self.recorder = RecordingProxy({"scripted": self.model.base_url}).start()
        self.addCleanup(self.recorder.stop)

    def test_bodies_are_byte_identical_with_and_without_the_proxy(self):
        model_port = self.model.server_address[1]
        for stream in (True, False):
            with self.subTest(stream=stream):
                request = chat_request(stream=stream, tools=[{"type": "function"}])
                _, _, direct = post(model_port, "/v1/chat/completions", request)
                _, _, proxied = post(self.recorder.port, "/scripted/chat/completions", request)
                self.assertEqual(direct, self.model.sent[-2])
                self.assertEqual(proxied, self.model.sent[-1])
                self.assertIn(b"chatcmpl-", proxied)

    def test_the_record_holds_the_served_response_id_session_status_and_usage(self):
        for stream in (True, False):
            with self.subTest(stream=stream):
                post(self.recorder.port, "/scripted/chat/completions", chat_request(stream=stream))
        self.recorder.stop()
        with open(self.log, encoding="utf-8") as handle:
            logged = [json.loads(line) for line in handle]
        records = self.recorder.records()
        self.assertEqual(len(records), 2)
        for record, line in zip(records, logged, strict=True):
            self.assertEqual(record.response_id, line["response_id"])
            self.assertEqual(record.usage, line["usage"])
            self.assertEqual((record.status, record.error, record.injected), (200, None, False))
            self.assertEqual((record.session, record.depth), (ROOT_LOG, 0))
            self.assertEqual((record.api, record.model), (proxy.OPENAI_COMPLETIONS, "fanout"))
            self.assertEqual(record.bytes_out, len(self.model.sent[record.seq - 1]))


# --- the ids and usage of each API --------------------------------------------------------------


class ResponseShapesTest(ProxyTest):
    def test_streamed_ids_and_usage_of_each_api(self):
        # Anthropic's: message_start's usage, then message_delta's non-null fields over it.
        anthropic_usage = {"input_tokens": 31, "output_tokens": 4, "cache_read_input_tokens": 5}
        for path, pieces, response_id, usage in (
            ("/up/chat/completions", CHAT_SSE, "chatcmpl-1", CHAT_USAGE),
            ("/up/responses", RESPONSES_SSE, "resp_1", RESPONSES_USAGE),
            ("/up/v1/messages", ANTHROPIC_SSE, "msg_1", anthropic_usage),
        ):
            with self.subTest(path=path):
                _, recorder = self.serve(lambda handler, p=pieces: send_chunked(handler, p))
                status, _, body = post(recorder.port, path, chat_request())
                self.assertEqual((status, body), (200, b"".join(pieces)))
                record = self.only_record(recorder)
                self.assertEqual(record.response_id, response_id)
                self.assertEqual(record.usage, usage)

    def test_json_ids_and_usage_of_each_api(self):
        for path, reply in (
            ("/up/chat/completions", CHAT_JSON),
            ("/up/responses", RESPONSES_JSON),
            ("/up/v1/messages", ANTHROPIC_JSON),
        ):
            with self.subTest(path=path):
                body = json.dumps(reply).encode()
                _, recorder = self.serve(lambda handler, b=body: send_whole(handler, b))
                self.assertEqual(post(recorder.port, path, chat_request())[2], body)
                record = self.only_record(recorder)
                self.assertEqual((record.response_id, record.usage), (reply["id"], reply["usage"]))

    def test_an_event_split_across_pieces_is_still_read(self):
        whole = b"".join(CHAT_SSE)
        pieces = [whole[:7], whole[7:150], whole[150:151], whole[151:]]
        _, recorder = self.serve(lambda handler: send_chunked(handler, pieces))
        self.assertEqual(post(recorder.port, "/up/chat/completions", chat_request())[2], whole)
        record = self.only_record(recorder)
        self.assertEqual(record.response_id, "chatcmpl-1")
        self.assertEqual(record.usage["completion_tokens"], 2)

    def test_the_session_and_depth_of_each_apis_requests(self):
        for path, request, session, depth in (
            ("/up/chat/completions", child_request("worker-events-01"), CHILD_LOG, 1),
            ("/up/v1/messages", anthropic_request(CHILD_LOG, 1), CHILD_LOG, 1),
            ("/up/responses", responses_request(ROOT_LOG, 0), ROOT_LOG, 0),
        ):
            with self.subTest(path=path):
                _, recorder = self.serve(lambda handler: send_whole(handler, b"{}"))
                post(recorder.port, path, request)
                record = self.only_record(recorder)
                self.assertEqual((record.session, record.depth), (session, depth))


# --- what is forwarded --------------------------------------------------------------------------


class ForwardingTest(ProxyTest):
    def test_method_path_query_body_and_end_to_end_headers_reach_the_upstream(self):
        upstream, recorder = self.serve(lambda handler: send_whole(handler, b"{}"))
        payload = json.dumps(chat_request()).encode()
        headers = {"X-Stainless-Lang": "js", "Connection": "keep-alive, X-Hop", "X-Hop": "1",
                   "Keep-Alive": "timeout=5"}  # fmt: skip
        post(recorder.port, "/up/chat/completions?api-version=2", payload, headers)
        (seen,) = upstream.seen
        names = {name.lower(): value for name, value in seen["headers"]}
        self.assertEqual(
            (seen["method"], seen["path"]), ("POST", "/base/chat/completions?api-version=2")
        )
        self.assertEqual(seen["body"], payload)
        self.assertEqual(names["host"], upstream.url.split("/")[2])
        self.assertEqual(names["x-stainless-lang"], "js")
        self.assertEqual(names["accept-encoding"], "identity")
        self.assertNotIn("x-hop", names)
        self.assertNotIn("keep-alive", names)

    def test_a_chunked_request_body_is_forwarded_whole(self):
        upstream, recorder = self.serve(lambda handler: send_whole(handler, b"{}"))
        payload = json.dumps(child_request("w-1")).encode()
        client = http.client.HTTPConnection("127.0.0.1", recorder.port, timeout=WAIT_S)
        self.addCleanup(client.close)
        client.request("POST", "/up/chat/completions", iter([payload[:10], payload[10:]]),
                       encode_chunked=True)  # fmt: skip
        self.assertEqual(client.getresponse().read(), b"{}")
        self.assertEqual(upstream.seen[0]["body"], payload)
        self.assertEqual(self.only_record(recorder).session, CHILD_LOG)

    def test_response_headers_pass_but_hop_by_hop_ones(self):
        extra = (("X-Request-Id", "req_7"), ("Keep-Alive", "timeout=5"))
        _, recorder = self.serve(lambda handler: send_chunked(handler, CHAT_SSE, headers=extra))
        _, headers, _ = post(recorder.port, "/up/chat/completions", chat_request())
        self.assertEqual(headers["X-Request-Id"], "req_7")
        self.assertEqual(headers["Content-Type"], "text/event-stream")
        self.assertNotIn("Keep-Alive", headers)

    def test_two_requests_share_one_connection_each_side(self):
        upstream, recorder = self.serve(lambda handler: send_chunked(handler, CHAT_SSE))
        client = http.client.HTTPConnection("127.0.0.1", recorder.port, timeout=WAIT_S)
        self.addCleanup(client.close)
        sockets = []
        for _ in range(2):
            client.request("POST", "/up/chat/completions", json.dumps(chat_request()))
            self.assertEqual(client.getresponse().read(), b"".join(CHAT_SSE))
            sockets.append(client.sock)
        self.assertIsNotNone(sockets[0])
        self.assertIs(sockets[0], sockets[1])  # http.client would have opened a new one
        self.assertEqual(upstream.seen[0]["port"], upstream.seen[1]["port"])

    def test_a_large_body_streams_before_the_upstream_finishes(self):
        first, rest = b"data: first\n\n", os.urandom(6 * 1024 * 1024)
        released = []

        def reply(handler):
            send_chunked(handler, (first,), end=False)
            released.append(told.wait(WAIT_S))
            for start in range(0, len(rest), 256 * 1024):
                piece = rest[start : start + 256 * 1024]
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            handler.wfile.write(b"0\r\n\r\n")

        told = threading.Event()
        _, recorder = self.serve(reply)
        client = http.client.HTTPConnection("127.0.0.1", recorder.port, timeout=WAIT_S)
        self.addCleanup(client.close)
        client.request("POST", "/up/chat/completions", json.dumps(chat_request()))
        response = client.getresponse()
        self.assertEqual(response.read1(), first)
        told.set()
        body = response.read()
        self.assertEqual(released, [True])  # the first piece came while the upstream waited
        self.assertEqual(hashlib.sha256(body).digest(), hashlib.sha256(rest).digest())
        self.assertEqual(self.only_record(recorder).bytes_out, len(first) + len(rest))


# --- upstream failures --------------------------------------------------------------------------


class UpstreamFailureTest(ProxyTest):
    def test_an_upstream_500_passes_through_as_it_is(self):
        error = b'{"error":{"message":"boom","type":"server_error"}}'
        _, recorder = self.serve(lambda handler: send_whole(handler, error, status=500))
        status, _, body = post(recorder.port, "/up/chat/completions", chat_request())
        self.assertEqual((status, body), (500, error))
        record = self.only_record(recorder)
        self.assertEqual((record.status, record.error, record.response_id), (500, None, None))

    def test_an_unreachable_upstream_is_a_502_with_a_json_error(self):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        recorder = RecordingProxy({"up": f"http://127.0.0.1:{port}"}).start()
        self.addCleanup(recorder.stop)
        status, _, body = post(recorder.port, "/up/chat/completions", chat_request())
        self.assertEqual(status, 502)
        self.assertIn("message", json.loads(body)["error"])
        record = self.only_record(recorder)
        self.assertEqual((record.status, record.error), (502, proxy.UPSTREAM_UNREACHABLE))

    def test_a_connection_reset_mid_stream_cuts_the_response(self):
        def reply(handler):
            send_chunked(handler, CHAT_SSE[:1], end=False)
            handler.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            handler.close_connection = True
            os.close(handler.connection.detach())  # with linger 0: a reset

        _, recorder = self.serve(reply)
        self.assert_cut_short(recorder, proxy.UPSTREAM_RESET)

    def test_a_stalled_stream_ends_within_the_read_timeout(self):
        def reply(handler):
            send_chunked(handler, CHAT_SSE[:1], end=False)
            upstream.release.wait(WAIT_S)

        # The recorded cause says which ended the stream: the proxy's read timeout, not the
        # upstream letting go (which happens only at cleanup).
        upstream, recorder = self.serve(reply, read_timeout=0.2)
        self.assert_cut_short(recorder, proxy.UPSTREAM_TIMEOUT)

    def test_no_answer_at_all_is_a_502_within_the_read_timeout(self):
        upstream, recorder = self.serve(lambda handler: upstream.release.wait(WAIT_S), 0.2)
        self.assertEqual(post(recorder.port, "/up/chat/completions", chat_request())[0], 502)
        record = self.only_record(recorder)
        self.assertEqual((record.status, record.error), (502, proxy.UPSTREAM_TIMEOUT))

    def assert_cut_short(self, recorder: RecordingProxy, code: str) -> None:
        """The product gets the first event, then a body without its end: never a whole one."""
        client = http.client.HTTPConnection("127.0.0.1", recorder.port, timeout=WAIT_S)
        self.addCleanup(client.close)
        client.request("POST", "/up/chat/completions", json.dumps(chat_request()))
        response = client.getresponse()
        self.assertEqual(response.status, 200)
        with self.assertRaises(http.client.IncompleteRead) as raised:
            response.read()
        self.assertEqual(raised.exception.partial, CHAT_SSE[0])
        record = self.only_record(recorder)
        self.assertEqual((record.status, record.error), (200, code))
        self.assertEqual(record.response_id, "chatcmpl-1")

    def test_an_unknown_route_is_a_404_and_a_websocket_upgrade_is_refused(self):
        upstream, recorder = self.serve(lambda handler: send_whole(handler, b"{}"))
        self.assertEqual(post(recorder.port, "/elsewhere/chat/completions", chat_request())[0], 404)
        upgrade = {"Upgrade": "websocket", "Connection": "Upgrade"}
        self.assertEqual(post(recorder.port, "/up/codex/responses", b"", upgrade)[0], 501)
        recorder.stop()
        errors = [record.error for record in recorder.records()]
        self.assertEqual(errors, [proxy.UNKNOWN_ROUTE, proxy.UPGRADE_REFUSED])
        self.assertEqual(upstream.seen, [])


# --- fault injection ----------------------------------------------------------------------------


class InjectionTest(ProxyTest):
    def test_the_named_workers_child_calls_fail_then_pass_and_no_one_else_is_touched(self):
        upstream, recorder = self.serve(lambda handler: send_chunked(handler, CHAT_SSE))
        recorder.inject_failures("worker-events-02", 2)
        path = "/up/chat/completions"
        root = chat_request(first_user=task("worker-events-02"))  # depth 0: not a child
        second, third = child_request("worker-events-02"), child_request("worker-events-03")
        calls = [second, third, root, second, second]
        answers = [post(recorder.port, path, call) for call in calls]
        self.assertEqual([status for status, _, _ in answers], [500, 200, 200, 500, 200])
        self.assertEqual(json.loads(answers[0][2])["error"]["type"], "server_error")
        self.assertEqual(len(upstream.seen), 3)
        recorder.stop()
        self.assertEqual(
            [record.injected for record in recorder.records()], [True, False, False, True, False]
        )

    def test_a_worker_is_named_whole(self):
        _, recorder = self.serve(lambda handler: send_chunked(handler, CHAT_SSE))
        recorder.inject_failures("worker-1", 1)
        path = "/up/chat/completions"
        self.assertEqual(post(recorder.port, path, child_request("worker-10"))[0], 200)
        self.assertEqual(post(recorder.port, path, child_request("worker-1"))[0], 500)

    def test_anthropic_calls_get_anthropics_error_shape_and_overload_status(self):
        upstream, recorder = self.serve(lambda handler: send_chunked(handler, ANTHROPIC_SSE))
        recorder.inject_failures("w-1", 1, status=529)
        status, _, body = post(recorder.port, "/up/v1/messages", anthropic_request())
        self.assertEqual(status, 529)
        self.assertEqual(json.loads(body)["error"]["type"], "overloaded_error")
        self.assertEqual(upstream.seen, [])
        record = self.only_record(recorder)
        self.assertEqual(
            (record.injected, record.status, record.api), (True, 529, "anthropic-messages")
        )


# --- what is never kept -------------------------------------------------------------------------


class SecretsTest(ProxyTest):
    def test_no_key_reaches_a_record_or_the_written_file(self):
        upstream, recorder = self.serve(lambda handler: send_chunked(handler, CHAT_SSE))
        headers = {"Authorization": f"Bearer {SECRET}", "x-api-key": SECRET}
        post(recorder.port, f"/up/chat/completions?key={SECRET}", chat_request(), headers)
        recorder.stop()
        forwarded = dict((name.lower(), value) for name, value in upstream.seen[0]["headers"])
        self.assertEqual(forwarded["authorization"], f"Bearer {SECRET}")
        self.assertEqual(forwarded["x-api-key"], SECRET)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model-calls.jsonl")
            recorder.write_jsonl(path)
            with open(path, encoding="utf-8") as handle:
                written = handle.read()
        self.assertEqual([json.loads(line) for line in written.splitlines()],
                         [record.to_json() for record in recorder.records()])  # fmt: skip
        self.assertIn("chatcmpl-1", written)
        self.assertNotIn(SECRET, written)
        self.assertNotIn(SECRET, repr(recorder.records()))


# --- the run's models.json ----------------------------------------------------------------------


PROXY_URL = "http://127.0.0.1:4000/anthropic"


class ModelsJsonOverrideTest(unittest.TestCase):
    def test_only_the_providers_base_url_changes_in_the_users_file(self):
        anthropic = {"apiKey": "ANTHROPIC_API_KEY", "modelOverrides": {"m": {"name": "M"}}}
        ollama = {"baseUrl": "http://localhost:11434/v1", "api": "openai-completions"}
        user = {"providers": {"anthropic": anthropic, "ollama": ollama}}
        before = json.dumps(user, sort_keys=True)
        config, upstream = models_json_override(user, "anthropic", PROXY_URL)
        expected = json.loads(before)
        expected["providers"]["anthropic"]["baseUrl"] = PROXY_URL
        self.assertEqual(config, expected)
        self.assertEqual(upstream, "https://api.anthropic.com")
        self.assertEqual(json.dumps(user, sort_keys=True), before)  # the user's dict is untouched

    def test_the_upstream_is_the_users_own_base_url_when_set(self):
        own = {"baseUrl": "http://127.0.0.1:8765/v1", "apiKey": "k", "models": [{"id": "fake-rlm"}]}
        user = {"providers": {"fake": own}}
        config, upstream = models_json_override(user, "fake", PROXY_URL)
        self.assertEqual(upstream, "http://127.0.0.1:8765/v1")
        self.assertEqual(config["providers"]["fake"]["baseUrl"], PROXY_URL)
        self.assertEqual(config["providers"]["fake"]["models"], [{"id": "fake-rlm"}])

    def test_without_a_user_file_a_built_in_provider_gets_its_default(self):
        for provider, default in (
            ("openai", "https://api.openai.com/v1"),
            ("openrouter", "https://openrouter.ai/api/v1"),
        ):
            with self.subTest(provider=provider):
                config, upstream = models_json_override(None, provider, PROXY_URL)
                self.assertEqual(config, {"providers": {provider: {"baseUrl": PROXY_URL}}})
                self.assertEqual(upstream, default)

    def test_an_explicit_upstream_wins(self):
        user = {"providers": {"anthropic": {"baseUrl": "https://corp.example/anthropic"}}}
        _, upstream = models_json_override(
            user, "anthropic", PROXY_URL, upstream="http://127.0.0.1:9/x"
        )
        self.assertEqual(upstream, "http://127.0.0.1:9/x")

    def test_an_unknown_provider_without_a_base_url_is_a_clear_error(self):
        with self.assertRaisesRegex(ValueError, "'my-llm'.*not built in") as raised:
            models_json_override({"providers": {}}, "my-llm", PROXY_URL)
        self.assertIn("--upstream URL", str(raised.exception))
        self.assertNotIn("did you mean", str(raised.exception))

    def test_an_unknown_provider_is_told_the_closest_known_one(self):
        user = {"providers": {"my-llm": {"baseUrl": "http://127.0.0.1:9/v1"}}}
        for typo, closest, also in (
            ("openaj", "openai", ()),
            ("my-lmm", "my-llm", ()),
            ("simulatd", "simulated", ("simulated", "scripted")),
        ):
            with self.subTest(typo=typo):
                with self.assertRaises(ValueError) as raised:
                    models_json_override(user, typo, PROXY_URL, also_known=also)
                self.assertIn(f"did you mean {closest}?", str(raised.exception))

    def test_providers_the_proxy_cannot_witness_or_place_are_refused(self):
        for provider, model_id, says in (
            ("github-copilot", None, "OAuth"),
            ("amazon-bedrock", None, "signed"),
            ("opencode", None, "2 base URLs"),
            ("cloudflare-workers-ai", None, "filled in"),
            ("azure-openai-responses", None, "filled in"),
            ("prime-inference", "internal/glm-5.2-fast", "own base URL"),
        ):
            with self.subTest(provider=provider), self.assertRaisesRegex(ValueError, says):
                models_json_override(None, provider, PROXY_URL, model_id=model_id)

    def test_a_users_model_with_its_own_base_url_is_refused(self):
        model = {"id": "m", "baseUrl": "http://127.0.0.1:2/v1"}
        user = {"providers": {"fake": {"baseUrl": "http://127.0.0.1:1/v1", "models": [model]}}}
        with self.assertRaisesRegex(ValueError, "fake/m"):
            models_json_override(user, "fake", PROXY_URL)

    def test_every_built_in_endpoint_names_a_known_api_kind(self):
        # The nine API kinds packages/ai/src/providers/register-builtins.ts registers.
        kinds = {
            "openai-completions", "openai-responses", "anthropic-messages",
            "google-generative-ai", "google-vertex", "mistral-conversations",
            "bedrock-converse-stream", "azure-openai-responses", "openai-codex-responses",
        }  # fmt: skip
        for provider, endpoints in agent_config.BUILTIN_PROVIDERS.items():
            for endpoint in endpoints:
                with self.subTest(provider=provider):
                    self.assertIn(endpoint.api, kinds)
                    self.assertTrue(
                        endpoint.base_url == "" or endpoint.base_url.startswith("https://")
                    )


class LifecycleTest(unittest.TestCase):
    def test_stop_closes_idle_kept_alive_connections(self):
        with Canned(lambda handler: send_whole(handler, b"{}")) as upstream:
            recorder = RecordingProxy({"up": upstream.url}).start()
            client = socket.create_connection(("127.0.0.1", recorder.port), timeout=WAIT_S)
            with contextlib.closing(client):
                request = json.dumps(chat_request()).encode()
                client.sendall(
                    b"POST /up/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(request), request)
                )
                received = b""
                while not received.endswith(b"{}"):
                    received += client.recv(65536)
                recorder.stop()
                self.assertEqual(client.recv(65536), b"")  # the proxy closed its side
            self.assertEqual(len(recorder.records()), 1)


class ModelsJsonSyntaxTest(unittest.TestCase):
    """The user's models.json is read as the product reads it: comments and trailing
    commas allowed, strings untouched; anything else is still an error."""

    def test_comments_and_trailing_commas_are_allowed_and_strings_kept(self):
        text = (
            '{\n  // the user\'s own notes\n  "providers": {"acme": {\n'
            '    "baseUrl": "http://127.0.0.1:9/v1", /* local */\n'
            '    "apiKey": "a//b,}",\n  },},\n  "list": [1, 2, // last\n  ],\n}\n'
        )
        self.assertEqual(
            agent_config.parse_models_json(text),
            {
                "providers": {"acme": {"baseUrl": "http://127.0.0.1:9/v1", "apiKey": "a//b,}"}},
                "list": [1, 2],
            },
        )

    def test_a_broken_file_is_still_an_error(self):
        with self.assertRaises(ValueError):
            agent_config.parse_models_json('{"providers": {"acme": }')


if __name__ == "__main__":
    unittest.main()
