#!/usr/bin/env python3
"""A stand-in for link-assistant/agent's permission protocol (docs/permissions.md
of link-assistant/agent, and what its 0.26.0 writes: scripts/e2e-link-agent runs the
real one): it runs the tool calls a user message lists,
asking first with a `permission_request` on stdout and waiting on stdin for the
`permission_response` naming it; an allowed call really runs (`bash` through
sh -c, `edit` writes the file). Everything it is told and does is logged.

    user line: {"type":"user","message":"[{\"tool\":\"bash\",\"command\":\"ls\"}, ...]"}

An `edit` with a `movePath` is the agent's `patch` moving a file (it asks as `edit`, with
`metadata.filePath`, `movePath` and `changeType`, title the new path); allowed, the file is
moved.

Environment: LINK_STANDIN_LOG (a JSON-lines log: argv and env first),
LINK_STANDIN_EXIT (the exit code at end of input, default 0).
"""
import json
import os
import subprocess
import sys

log = open(os.environ["LINK_STANDIN_LOG"], "a", buffering=1)
log.write(json.dumps({"argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items()
                                                     if k.startswith("LINK_ASSISTANT_AGENT_")}}) + "\n")


def say(event):
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def answer_to(permission):
    for line in sys.stdin:
        frame = json.loads(line)
        if frame.get("type") == "permission_response":
            log.write(json.dumps({"response": frame}) + "\n")
            if frame.get("permissionID", frame.get("permission_id")) == permission:
                return frame["response"]
        else:
            log.write(json.dumps({"told": frame}) + "\n")
    return None


number = 0
say({"type": "step_start", "sessionID": "ses_standin"})
for line in sys.stdin:
    frame = json.loads(line)
    log.write(json.dumps({"told": frame}) + "\n")
    if frame.get("type") != "user":
        continue
    for call in json.loads(frame["message"]):
        number += 1
        permission, call_id = f"per_{number}", f"call_{number}"
        request = {"type": "permission_request", "timestamp": 1718630400000, "sessionID": "ses_standin",
                   "permissionID": permission, "callID": call_id, "tool": call["tool"]}
        if call["tool"] == "bash":
            # The agent's pattern: the command's first word and first non-flag argument.
            words = call["command"].split()
            rest = [word for word in words[1:] if not word.startswith("-")]
            pattern = f"{words[0]} {rest[0]} *" if rest else f"{words[0]} *"
            request.update(pattern=[pattern], title=call["command"],
                           metadata={"command": call["command"], "patterns": [pattern]})
        elif call["tool"] == "edit" and call.get("movePath"):
            request.update(title=call["movePath"],
                           metadata={"filePath": call["filePath"], "movePath": call["movePath"],
                                     "changeType": "move"})
        elif call["tool"] == "edit":
            request.update(title=call["filePath"], metadata={"filePath": call["filePath"]})
        elif call["tool"] == "webfetch":
            request.update(title=call["url"], metadata={"url": call["url"]})
        say(request)
        response = answer_to(permission)
        status = "rejected"
        if response in ("once", "always"):
            status = "completed"
            if call["tool"] == "bash":
                subprocess.run(["sh", "-c", call["command"]], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            elif call["tool"] == "edit" and call.get("movePath"):
                os.replace(call["filePath"], call["movePath"])
            elif call["tool"] == "edit":
                with open(call["filePath"], "w") as out:
                    out.write("written\n")
        say({"type": "tool_use", "callID": call_id, "tool": call["tool"], "status": status})
    say({"type": "text", "text": "turn done"})
sys.exit(int(os.environ.get("LINK_STANDIN_EXIT", "0")))
