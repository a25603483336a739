#!/usr/bin/env python3
"""Scripted OpenAI-compatible chat server for offline harbor / terminus-2 runs.

    python mock_llm.py --port 18089 [--log requests.jsonl]

Answers POST /v1/chat/completions the way vLLM does when harbor asks for rollout
details (`logprobs: true`, `return_token_ids: true`): a top-level
`prompt_token_ids`, a per-choice `token_ids` and `logprobs.content`. Tokens come from
a toy word-level tokenizer over a toy chat template, so, as with a real model,
prompt[k+1] starts with prompt[k] + completion[k]. Ids and logprobs are synthetic.

Which script answers is chosen by a phrase in the task instruction (SCRIPTS); the
turn is the number of assistant messages already in the request; the attempt is a
per-script counter of first turns seen by this server process. The first answer of a
conversation carries its attempt ("[attempt N]" at the start of its analysis, or of its
text), and every later turn reads it back from there, so each trial follows its own
attempt's script however many trials of the same task run at once (wmo-lake's copy: the
kit's original used the latest counter for every turn).
"""

import argparse
import json
import re
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# ---------------------------------------------------------------- replies


def act(commands, done=False, analysis="", plan=""):
    """A valid terminus-2 JSON answer; commands are (keystrokes, duration) pairs."""
    return "stop", json.dumps(
        {
            "analysis": analysis or "Looking at the terminal.",
            "plan": plan or "Run the next command.",
            "commands": [{"keystrokes": k, "duration": d} for k, d in commands],
            "task_complete": done,
        },
        indent=2,
    )


MALFORMED = ("stop", "Sure! I will just write the file now, no JSON needed.")


def truncated(reply):
    """The same answer cut off mid-way: finish_reason 'length' (max tokens hit)."""
    return "length", reply[1][: len(reply[1]) // 3]


DONE = act([], done=True, analysis="The task is done.", plan="Confirm completion.")


def hello(attempt):  # passes; attempts vary: clean / malformed first / max tokens first
    write = act([("printf 'Hello, world!\\n' > /app/hello.txt\n", 0.1)], plan="Write the file.")
    check = act([("cat /app/hello.txt\n", 0.1)], done=True, plan="Check it, then finish.")
    first = [[], [MALFORMED], [truncated(write)]][attempt % 3]
    return [*first, write, check, DONE]


def sum_numbers(attempt):  # fails: writes 6; odd attempts never finish (max_turns)
    wrong = act([("echo 6 > /app/answer.txt\n", 0.1)], plan="2 + 3 is 6.")
    look = act([("cat /app/answer.txt\n", 0.1)], plan="Look at the answer again.")
    if attempt % 2:
        return [wrong, look]  # the last reply repeats until max_turns
    return [wrong, act([], done=True), DONE]


def report(attempt):  # the task whose verifier writes no reward
    return [act([("echo done > /app/report.txt\n", 0.1)]), act([], done=True), DONE]


def multi(attempt):  # verifier writes reward.json with two keys
    return [
        act([("printf 'a\\nb\\nc\\n' > /app/letters.txt && wc -l /app/letters.txt\n", 0.2)]),
        act([], done=True),
        DONE,
    ]


SCRIPTS = {  # phrase in the instruction -> script
    "/app/hello.txt": hello,
    "/app/answer.txt": sum_numbers,
    "/app/report.txt": report,
    "/app/letters.txt": multi,
}

# ---------------------------------------------------------------- toy tokenizer

SPECIAL = {"<|bos|>": 1, "system": 2, "user": 3, "assistant": 4, "<|end|>": 5}


def pieces(text):
    return re.findall(r"\w+|[^\w\s]|\s+", text)


def token_id(piece):
    return 100 + zlib.crc32(piece.encode()) % 50000


def text_of(content):
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def prompt_ids(messages):
    ids = [SPECIAL["<|bos|>"]]
    for m in messages:
        ids += [SPECIAL.get(m.get("role"), 3)]
        ids += [token_id(p) for p in pieces(text_of(m.get("content")))]
        ids += [SPECIAL["<|end|>"]]
    return [*ids, SPECIAL["assistant"]]


def logprob(piece, position):
    return -round((zlib.crc32(f"{position}:{piece}".encode()) % 3000) / 1000.0, 3)


# ---------------------------------------------------------------- server

_attempts: dict[str, int] = {}
_lock = threading.Lock()


ATTEMPT_TAG = re.compile(r"\[attempt (\d+)\] ")


def tag_attempt(content, attempt):
    """The first answer marked with its attempt, inside the JSON's analysis when it has one
    (even cut short), so the answer parses exactly as it would untagged."""
    tag = f"[attempt {attempt}] "
    if '"analysis": "' in content:
        return content.replace('"analysis": "', '"analysis": "' + tag, 1)
    return tag + content


def answer(body):
    messages = body.get("messages", [])
    first_user = next((text_of(m["content"]) for m in messages if m.get("role") == "user"), "")
    key = next((k for k in SCRIPTS if k in first_user), None)
    assistant = [text_of(m.get("content")) for m in messages if m.get("role") == "assistant"]
    turn = len(assistant)
    tagged = ATTEMPT_TAG.search(assistant[0]) if assistant else None
    with _lock:
        if turn == 0:
            _attempts[key] = _attempts.get(key, -1) + 1
        attempt = int(tagged.group(1)) if tagged else _attempts.get(key, 0)
    script = SCRIPTS[key](attempt) if key else [DONE]
    finish, content = script[min(turn, len(script) - 1)]
    if turn == 0:
        content = tag_attempt(content, attempt)

    p_ids = prompt_ids(messages)
    c_pieces = pieces(content) + (["<|end|>"] if finish == "stop" else [])
    c_ids = [SPECIAL.get(p) or token_id(p) for p in c_pieces]
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": content},
        "finish_reason": finish,
    }
    if body.get("logprobs"):
        choice["logprobs"] = {
            "content": [
                {
                    "token": p,
                    "logprob": logprob(p, i),
                    "bytes": list(p.encode()),
                    "top_logprobs": [],
                }
                for i, p in enumerate(c_pieces)
            ]
        }
    response = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "mock"),
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(p_ids),
            "completion_tokens": len(c_ids),
            "total_tokens": len(p_ids) + len(c_ids),
            "prompt_tokens_details": {
                "cached_tokens": len(prompt_ids(messages[:-1])) if turn else 0
            },
        },
    }
    if body.get("return_token_ids"):
        response["prompt_token_ids"] = p_ids
        choice["token_ids"] = c_ids
    return response, {"script": key, "attempt": attempt, "turn": turn, "finish": finish}


class Handler(BaseHTTPRequestHandler):
    log_path = None

    def _send(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            return self._send(200, {"object": "list", "data": [{"id": "mock", "object": "model"}]})
        self._send(200 if self.path == "/health" else 404, {"ok": self.path == "/health"})

    def do_POST(self):
        if not self.path.rstrip("/").endswith("/chat/completions"):
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        response, note = answer(body)
        if self.log_path:
            with _lock, open(self.log_path, "a") as f:
                f.write(json.dumps({**note, "request_keys": sorted(body)}) + "\n")
        self._send(200, response)

    def log_message(self, *args):  # keep stderr quiet
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18089)
    parser.add_argument("--log", help="append one JSON line per request")
    args = parser.parse_args()
    Handler.log_path = args.log
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"mock LLM on http://{args.host}:{server.server_port}/v1", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
