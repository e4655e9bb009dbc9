// A minimal toolgate client for Node (no dependencies): an agent loop's tool
// calls go through a spawned `toolgate serve`, its questions to a callback.
//
//   import { Toolgate } from "./toolgate_client.mjs";
//   const gate = await Toolgate.spawn(["toolgate", "serve", "--mode", "plan"], { onQuestion });
//   gate.startSession("main");
//   const decision = await gate.check("main", "bash", { command: "ls" });
//   if (decision.decision === "allow") runIt();
//   await gate.close();
//
// `check` resolves when toolgate decides; many calls may be pending at once.
// `onQuestion(request)` returns (or resolves to) "once", "always", "reject", or
// ["reject", "a message for the model"]. `close()` ends toolgate's input: every
// call still pending gets its denial.
//
// Demo: node toolgate_client.mjs [--toolgate BIN] [--answer once|reject] [--mode MODE] CALLS.json
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { readFileSync } from "node:fs";

export class Toolgate {
  static spawn(command, { onQuestion = () => "reject" } = {}) {
    const gate = new Toolgate(command, onQuestion);
    return gate.ready.then(() => gate);
  }

  constructor([program, ...args], onQuestion) {
    this.process = spawn(program, args, { stdio: ["pipe", "pipe", "inherit"] });
    this.onQuestion = onQuestion;
    this.waiting = new Map(); // "session\u0000call" -> resolve
    this.next = 1;
    let ready;
    this.ready = new Promise((resolve, reject) => {
      ready = resolve;
      this.process.on("error", reject); // toolgate could not be started
    });
    const lines = createInterface({ input: this.process.stdout });
    lines.on("line", (line) => {
      const frame = JSON.parse(line);
      if (frame.type === "ready") return ready(frame);
      const key = `${frame.sessionID}\u0000${frame.callID}`;
      if (frame.type === "decision" && this.waiting.has(key)) {
        this.waiting.get(key)(frame);
        this.waiting.delete(key);
      } else if (frame.type === "permission_request") {
        this.answer(frame);
      }
    });
    lines.on("close", () => {
      for (const resolve of this.waiting.values()) {
        resolve({ decision: "deny", source: "shutdown", reason: "toolgate ended" });
      }
      this.waiting.clear();
    });
    this.exited = new Promise((resolve) => this.process.on("exit", resolve));
  }

  send(frame) {
    this.process.stdin.write(JSON.stringify(frame) + "\n");
  }

  async answer(request) {
    const answer = await this.onQuestion(request);
    const [reply, message] = Array.isArray(answer) ? answer : [answer];
    const frame = { type: "permission_response", permissionID: request.permissionID, response: reply };
    if (message) frame.message = message;
    this.send(frame);
  }

  startSession(sessionID, { mode, parentID } = {}) {
    this.send({ type: "session_start", sessionID, ...(mode && { mode }), ...(parentID && { parentID }) });
  }

  setMode(sessionID, mode) {
    this.send({ type: "set_mode", sessionID, mode });
  }

  check(sessionID, tool, input, cwd) {
    const callID = `call-${this.next++}`;
    const decided = new Promise((resolve) => this.waiting.set(`${sessionID}\u0000${callID}`, resolve));
    this.send({ type: "tool_call", sessionID, callID, tool, input, ...(cwd && { cwd }) });
    return decided;
  }

  close() {
    this.process.stdin.end();
    return this.exited;
  }
}

async function main(argv) {
  const args = { "--toolgate": "toolgate", "--answer": null, "--mode": "ask" };
  const files = [];
  while (argv.length) {
    const flag = argv.shift();
    if (flag in args) args[flag] = argv.shift();
    else files.push(flag);
  }
  const calls = JSON.parse(readFileSync(files[0], "utf8"));
  const onQuestion = (request) => {
    console.log(`asked: ${request.title} -> ${args["--answer"] ?? "reject"}`);
    return args["--answer"] === "once" ? "once" : ["reject", "not now"];
  };
  const gate = await Toolgate.spawn([args["--toolgate"], "serve", "--mode", args["--mode"]], { onQuestion });
  gate.startSession("demo");
  for (const [tool, input] of calls) {
    // The agent's loop: each call is checked before it runs.
    const decision = await gate.check("demo", tool, input);
    const verdict = decision.decision === "allow" ? "runs" : "refused";
    console.log(`${tool} ${JSON.stringify(input)}: ${verdict} (${decision.reason})`);
  }
  await gate.close();
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main(process.argv.slice(2));
}
