#!/usr/bin/env python3
"""A minimal toolgate client: an agent loop's tool calls go through a spawned
`toolgate serve`, and its questions to a callback. Standard library only.

    from toolgate_client import Toolgate
    with Toolgate(["toolgate", "serve", "--mode", "plan"], on_question=ask_me) as gate:
        gate.start_session("main")
        decision = gate.check("main", "bash", {"command": "ls"})
        if decision["decision"] == "allow": run_it()

`check` blocks until toolgate decides; calls from several threads may be pending at
once, each question handed to `on_question(request)`, which returns "once",
"always", "reject", or ("reject", "a message for the model"). `close()` ends
toolgate's input: every call still pending gets its denial.

Run it as a demo: python3 toolgate_client.py [--toolgate BIN] [--answer once|reject]
[--mode MODE] CALLS.json   (a list of [tool, input]; questions are answered by
--answer, else asked on the terminal).
"""
import itertools
import json
import subprocess
import sys
import threading


class Toolgate:
    def __init__(self, command, on_question=None):
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, bufsize=1)
        self.on_question = on_question or (lambda request: "reject")
        self.lock = threading.Lock()
        self.waiting = {}  # (session, call) -> [event, decision]
        self.ids = itertools.count(1)
        self.ready = json.loads(self.process.stdout.readline())
        threading.Thread(target=self._read, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _send(self, frame):
        with self.lock:
            self.process.stdin.write(json.dumps(frame) + "\n")
            self.process.stdin.flush()

    def _read(self):
        for line in self.process.stdout:
            frame = json.loads(line)
            kind, key = frame.get("type"), (frame.get("sessionID"), frame.get("callID"))
            if kind == "decision" and key in self.waiting:
                slot = self.waiting.pop(key)
                slot[1] = frame
                slot[0].set()
            elif kind == "permission_request":
                # Answered on a thread of its own: a person may take a while.
                threading.Thread(target=self._answer, args=(frame,), daemon=True).start()
        for slot in list(self.waiting.values()):  # toolgate is gone: nothing runs
            slot[1] = {"decision": "deny", "source": "shutdown", "reason": "toolgate ended"}
            slot[0].set()

    def _answer(self, request):
        answer = self.on_question(request)
        reply, message = (answer, None) if isinstance(answer, str) else answer
        frame = {"type": "permission_response", "permissionID": request["permissionID"], "response": reply}
        if message:
            frame["message"] = message
        self._send(frame)

    def start_session(self, session, mode=None, parent=None):
        frame = {"type": "session_start", "sessionID": session}
        if mode:
            frame["mode"] = mode
        if parent:
            frame["parentID"] = parent
        self._send(frame)

    def set_mode(self, session, mode):
        self._send({"type": "set_mode", "sessionID": session, "mode": mode})

    def check(self, session, tool, tool_input, cwd=None):
        """toolgate's decision for one call: a dict with decision, source, reason."""
        call = f"call-{next(self.ids)}"
        slot = [threading.Event(), None]
        with self.lock:
            self.waiting[(session, call)] = slot
        frame = {"type": "tool_call", "sessionID": session, "callID": call, "tool": tool, "input": tool_input}
        if cwd:
            frame["cwd"] = cwd
        self._send(frame)
        slot[0].wait()
        return slot[1]

    def close(self):
        try:
            self.process.stdin.close()
        except OSError:
            pass
        self.process.wait()


def main(argv):
    args = {"--toolgate": "toolgate", "--answer": None, "--mode": "ask"}
    files = []
    while argv:
        flag = argv.pop(0)
        if flag in args:
            args[flag] = argv.pop(0)
        else:
            files.append(flag)
    calls = json.load(open(files[0]))

    def ask(request):
        if args["--answer"]:
            print(f"asked: {request['title']} -> {args['--answer']}", flush=True)
            return (args["--answer"], "not now") if args["--answer"] == "reject" else args["--answer"]
        reply = input(f"allow {request['title']}? [once/always/reject] ").strip() or "reject"
        return reply

    with Toolgate([args["--toolgate"], "serve", "--mode", args["--mode"]], on_question=ask) as gate:
        gate.start_session("demo")
        for tool, tool_input in calls:  # the agent's loop: each call is checked first
            decision = gate.check("demo", tool, tool_input)
            verdict = "runs" if decision["decision"] == "allow" else "refused"
            print(f"{tool} {json.dumps(tool_input)}: {verdict} ({decision['reason']})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
