// toolgate's approval page. Every text that comes from an agent is put in
// with textContent: this script never writes HTML.
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="toolgate-csrf"]').content;
  const answers = document.querySelector('meta[name="toolgate-role"]').content !== "observer";
  const list = document.getElementById("questions");
  const status = document.getElementById("status");
  const trouble = document.getElementById("trouble");
  const empty = document.getElementById("empty");
  const count = document.getElementById("count");
  const LIFETIME = 1800;

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function say(text) { status.textContent = text; }

  async function answer(q, card, fields) {
    const body = new URLSearchParams(fields);
    body.set("id", q.id);
    body.set("csrf", csrf);
    for (const b of card.querySelectorAll("button")) b.disabled = true;
    try {
      const response = await fetch("/answer", {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded", "X-CSRF-Token": csrf },
        body: body.toString(),
        credentials: "same-origin",
      });
      let message = "";
      try { message = (await response.json()).message || ""; } catch (e) { message = response.statusText; }
      say(message);
      if (response.status === 401) location.reload();
      if (response.ok || response.status === 409 || response.status === 404) {
        card.remove();
        refreshCount();
      } else {
        for (const b of card.querySelectorAll("button")) b.disabled = false;
      }
    } catch (e) {
      say("The answer could not be sent: " + e);
      for (const b of card.querySelectorAll("button")) b.disabled = false;
    }
  }

  function card(q) {
    const node = el("section", "question");
    node.dataset.qid = q.id;
    const tool = q.toolName && q.toolName !== q.tool ? q.tool + " (" + q.toolName + ")" : (q.tool || "?");
    node.appendChild(el("h2", "title mono", tool + ": " + (q.title || "")));
    let where = "host " + q.host + " · session " + q.session;
    if (q.parent) where += " (sub-session of " + q.parent + ")";
    if (q.client) where += " · " + q.client;
    where += " · " + q.project;
    node.appendChild(el("div", "where", where));
    if (q.reason) node.appendChild(el("div", "reason", "Why it asks: " + q.reason));
    const pre = el("pre", "detail");
    for (const [tone, text] of q.lines) pre.appendChild(el("span", "t-" + tone, text));
    node.appendChild(pre);
    if (!answers) return node;

    let level = q.options.length - 1;
    if (q.options.length > 0) {
      const set = el("fieldset");
      set.appendChild(el("legend", null, "“Always” grants (narrow → wide)"));
      q.options.forEach((option, index) => {
        const label = el("label", "mono");
        const radio = el("input");
        radio.type = "radio";
        radio.name = "level-" + q.id;
        radio.value = String(index);
        radio.checked = index === level;
        radio.addEventListener("change", () => { level = index; });
        label.appendChild(radio);
        label.appendChild(el("span", null, q.tool + " " + option.join(", ")));
        set.appendChild(label);
      });
      node.appendChild(set);
    } else if (q.plan) {
      node.appendChild(el("div", "where", "“Always” approves the plan and leaves plan mode."));
    }
    const actions = el("div", "actions");
    const once = el("button", "primary once", "Allow once");
    once.type = "button";
    once.addEventListener("click", () => answer(q, node, { choice: "once" }));
    actions.appendChild(once);
    const always = el("button", "always", "Always");
    always.type = "button";
    always.addEventListener("click", () => answer(q, node, { choice: "always", level: String(level) }));
    actions.appendChild(always);
    if (!q.plan && q.options.length > 0) {
      const timed = el("button", "timed", "Always for 30 min");
      timed.type = "button";
      timed.addEventListener("click", () =>
        answer(q, node, { choice: "always", level: String(level), lifetime: String(LIFETIME) }));
      actions.appendChild(timed);
    }
    node.appendChild(actions);
    const rejecting = el("div", "rejecting");
    const message = el("input");
    message.type = "text";
    message.placeholder = "Message for the agent (optional)";
    message.setAttribute("aria-label", "Message for the agent");
    const reject = el("button", "reject", "Reject");
    reject.type = "button";
    reject.addEventListener("click", () => answer(q, node, { choice: "reject", message: message.value }));
    rejecting.appendChild(message);
    rejecting.appendChild(reject);
    node.appendChild(rejecting);
    return node;
  }

  function refreshCount() {
    const n = list.children.length;
    count.textContent = n === 1 ? "1 open question" : n + " open questions";
    empty.hidden = n !== 0;
  }

  function show(snapshot) {
    trouble.hidden = !snapshot.trouble;
    trouble.textContent = snapshot.trouble || "";
    const wanted = new Set(snapshot.questions.map((q) => q.id));
    for (const node of Array.from(list.children)) {
      if (!wanted.has(node.dataset.qid)) node.remove();
    }
    const have = new Set(Array.from(list.children).map((node) => node.dataset.qid));
    for (const q of snapshot.questions) {
      if (!have.has(q.id)) list.appendChild(card(q));
    }
    refreshCount();
  }

  const events = new EventSource("/events");
  events.addEventListener("questions", (event) => show(JSON.parse(event.data)));
  events.addEventListener("logout", () => { events.close(); location.reload(); });
  events.onerror = () => say("Connection to the server lost; reconnecting…");
  events.onopen = () => say("");
})();
