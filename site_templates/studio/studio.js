// BenchClaw Studio: follow a job over server-sent events. No framework, no innerHTML:
// every text from the server is set with textContent, so nothing in an event can run.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || live.getAttribute("data-running") !== "yes" || !window.EventSource) { return; }
  var note = document.getElementById("running-note");
  if (note) { note.textContent = "Running… turns appear as they are recorded."; }

  function item(cls, text) {
    var li = document.createElement("li");
    li.className = cls;
    li.textContent = text;
    live.appendChild(li);
  }
  function usd(c) {
    if (!c) { return "–"; }
    return c.low === c.high ? "$" + c.low : "$" + c.low + "–$" + c.high;
  }
  function tokens(n) { return n === null || n === undefined ? "–" : String(n); }
  function setText(id, text) { var el = document.getElementById(id); if (el) { el.textContent = text; } }
  function budget(b) {
    if (!b) { return; }
    setText("remaining-usd", "$" + b.remaining_usd);
    setText("remaining-tokens", String(b.remaining_tokens));
    setText("runs-left", String(b.runs_left));
  }
  var render = {
    run: function (d) { item("ev-run", "run " + (d.step + 1) + " on tier " + d.tier); },
    call: function (d) {
      var t = d.tokens || {};
      item("ev-call", "model call · turn " + ((d.turn || 0) + 1) + (d.attempt ? " · retry " + d.attempt : "") +
        " · " + d.outcome + " · " + tokens(t.prompt) + " → " + tokens(t.completion) + " tokens" +
        (t.reasoning ? " (" + t.reasoning + " reasoning)" : "") + " · " + tokens(d.latency_ms) + " ms · " + usd(d.cost));
    },
    action: function (d) {
      item("ev-action " + (d.permitted ? "permitted" : "denied"), "action " + d.name + (d.path ? " " + d.path : "") +
        " · " + (d.permitted ? "permitted" : "denied: " + d.reason) + (d.injection ? " · injection lure " + d.injection : ""));
    },
    check: function (d) {
      item("ev-check", "check " + d.id + (d.gate ? " (gate)" : "") + (d.heldout ? " (held-out)" : "") + ": " +
        (d.passed ? "passed" : "failed"));
    },
    escalate: function (d) { item("ev-escalate", "ladder escalates from " + d.from + " to " + d.to + ": " + d.why); },
    end: function (d) { item("ev-end", "run ended: " + d.status + " — " + d.reason + " · " + usd(d.cost)); },
    sealed: function (d) {
      var ul = document.getElementById("replays");
      var li = document.createElement("li");
      var a = document.createElement("a");
      a.href = "/runs/" + d.run_id.slice(0, 2) + "/" + d.run_id + ".html";
      a.textContent = "run " + d.run_id.slice(0, 12) + " (" + d.tier + ")";
      li.appendChild(a);
      ul.appendChild(li);
    },
    budget: budget,
    done: function (d) {
      budget(d.budget);
      setText("job-status", d.status);
      setText("done-text", d.status + (d.detail ? ": " + d.detail : ""));
      document.getElementById("done").className = "";
      if (note) { note.parentNode.removeChild(note); }
      if (d.status === "refused") {
        var p = document.createElement("div");
        p.className = "refusal";
        p.id = "refused-live";
        p.textContent = "The budget ran out during this job: " + d.detail;
        document.getElementById("done").insertBefore(p, document.getElementById("done").firstChild);
      }
      es.close();
    }
  };
  var es = new EventSource(live.getAttribute("data-events"));
  Object.keys(render).forEach(function (kind) {
    es.addEventListener(kind, function (e) { render[kind](JSON.parse(e.data)); });
  });
})();
