#!/usr/bin/env python3
"""A scripted stand-in for Claude Code in stream-json mode with
`--permission-prompt-tool stdio`, as Claude Code 2.1.328 speaks it.

    fake_claude.py SCRIPT.json LOG.jsonl EXIT_CODE

SCRIPT is a list of lines to print (strings, printed as they are; a
line given as `{"nowait": LINE}` is printed without waiting). After
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


for line in json.load(open(script_path)):
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
        while True:
            got = read()
            if not got:
                sys.exit(99)
            try:
                answer = json.loads(got)
            except ValueError:
                continue
            if (answer.get("type") == "control_response"
                    and answer.get("response", {}).get("request_id") == message["request_id"]):
                break
say('{"type":"fake_done"}')
while read():
    pass
say('{"type":"result","subtype":"success","session_id":"sess-fake"}')
sys.exit(code)
