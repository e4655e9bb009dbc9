#!/usr/bin/env python3
"""A scripted stand-in for Claude Code in stream-json mode with
`--permission-prompt-tool stdio`, as Claude Code 2.1.328 speaks it.

    fake_claude.py SCRIPT.json LOG.jsonl EXIT_CODE

SCRIPT is a list of lines to print (strings, printed as they are; a
line given as `{"nowait": LINE}` is printed without waiting). An entry
`{"hook": INPUT, "id": ID}` is a tool call as Claude Code makes one: it
reads its stdin until an `initialize` request (the hooks it registers),
calls each `PreToolUse` hook callback (`hook_callback` with request id
`ID-hN`, INPUT as the hook input) and waits for each answer; if none
denies and one says `ask`, it asks `can_use_tool` (request id ID, the
tool, its input and `tool_use_id`) and waits for the answer. After
printing a `control_request` whose `request.subtype` is `can_use_tool` and
that has a `request_id`, it reads its stdin until the `control_response`
to that id. Every line it reads is appended to LOG as it was received.
When the script is done it prints `{"type":"fake_done"}`, reads its stdin
to the end, prints a `result` line and exits with EXIT_CODE.
"""
import json
import sys

script_path, log_path, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
log = open(log_path, "w")


def read():
    line = sys.stdin.readline()
    if line:
        log.write(line)
        log.flush()
    return line


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


hooks = None


def answer_to(request_id):
    """Read stdin until the control_response to `request_id`; its response."""
    while True:
        got = read()
        if not got:
            sys.exit(99)
        try:
            answer = json.loads(got)
        except ValueError:
            continue
        note(answer)
        if (answer.get("type") == "control_response"
                and answer.get("response", {}).get("request_id") == request_id):
            return answer["response"]


def note(message):
    """Keep the hooks of an initialize request."""
    global hooks
    if (isinstance(message, dict) and message.get("type") == "control_request"
            and message.get("request", {}).get("subtype") == "initialize"):
        hooks = message["request"].get("hooks") or {}


def call(entry):
    while hooks is None:
        got = read()
        if not got:
            sys.exit(98)
        try:
            note(json.loads(got))
        except ValueError:
            pass
    decisions = []
    ids = [i for matcher in hooks.get("PreToolUse") or [] for i in matcher.get("hookCallbackIds") or []]
    for n, callback in enumerate(ids):
        request_id = f"{entry['id']}-h{n}"
        say(json.dumps({"type": "control_request", "request_id": request_id,
                        "request": {"subtype": "hook_callback", "callback_id": callback,
                                    "input": entry["hook"],
                                    "tool_use_id": entry["hook"].get("tool_use_id")}}))
        response = answer_to(request_id).get("response") or {}
        decisions.append((response.get("hookSpecificOutput") or {}).get("permissionDecision"))
    if "deny" in decisions or "ask" not in decisions:
        return
    say(json.dumps({"type": "control_request", "request_id": entry["id"],
                    "request": {"subtype": "can_use_tool", "tool_name": entry["hook"]["tool_name"],
                                "input": entry["hook"].get("tool_input") or {},
                                "tool_use_id": entry["hook"].get("tool_use_id")}}))
    answer_to(entry["id"])


for line in json.load(open(script_path)):
    if isinstance(line, dict) and "hook" in line:
        call(line)
        continue
    if isinstance(line, dict):
        say(line["nowait"])
        continue
    say(line)
    try:
        message = json.loads(line)
    except ValueError:
        continue
    if (isinstance(message, dict) and message.get("type") == "control_request"
            and message.get("request", {}).get("subtype") == "can_use_tool"
            and "request_id" in message):
        answer_to(message["request_id"])
say('{"type":"fake_done"}')
while read():
    pass
say('{"type":"result","subtype":"success","session_id":"sess-fake"}')
sys.exit(code)
