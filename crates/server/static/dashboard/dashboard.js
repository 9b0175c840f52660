// Anteroom operator dashboard: polls GET /admin/events every second with the
// admin token from sessionStorage, keeps the last 15 minutes of every event
// in memory (and in sessionStorage, so a reload keeps the charts), and offers
// pause / resume / close / max_active behind a confirmation.
//
// The token never goes into a URL: it is read from a password field, kept in
// this tab's sessionStorage and sent only as an Authorization header. Every
// value shown is set with textContent: event ids and names never become HTML.
"use strict";
(function () {
  var TOKEN_KEY = "anteroom.dashboard.token";
  var HISTORY_KEY = "anteroom.dashboard.history";
  var POLL_MS = 1000;
  // Refusals change when config files or versions do: a look every 5 s.
  var REFUSALS_EVERY = 5;
  var WINDOW_MS = 15 * 60 * 1000;
  var SVG = "http://www.w3.org/2000/svg";

  var $ = function (id) { return document.getElementById(id); };
  // Maps keyed by event id are objects without a prototype: an event may
  // be called "constructor" or "__proto__" (any [A-Za-z0-9_-] id is), and
  // on a plain object those names find Object.prototype's members.
  function dict() { return Object.create(null); }
  var history = loadHistory();
  var cards = dict();
  var timer = null;
  // Each poll's number: an answer to any but the latest (one still on its
  // way when the operator signed out, or when a control's answer polled
  // again) is dropped, or it drew the charts again after the sign-out,
  // saved them for the next operator of this tab, and polled on.
  var pollGen = 0;
  // Each sign-in's number (moved on at sign-in and sign-out).
  var signIns = 0;
  var readOnly = false;
  var lastOk = 0;
  var polls = 0;

  function token() { return sessionStorage.getItem(TOKEN_KEY); }

  function loadHistory() {
    try {
      var h = JSON.parse(sessionStorage.getItem(HISTORY_KEY) || "{}");
      var out = dict();
      if (h && typeof h === "object") {
        Object.keys(h).forEach(function (id) { if (Array.isArray(h[id])) out[id] = h[id]; });
      }
      return out;
    } catch (e) { return dict(); }
  }

  // Saved after every refresh (a few kilobytes per event at most), so a
  // reload at any moment finds the charts as they were.
  function saveHistory() {
    try { sessionStorage.setItem(HISTORY_KEY, JSON.stringify(history)); } catch (e) { /* quota: memory only */ }
  }

  function api(method, path, body) {
    var init = { method: method, headers: { Authorization: "Bearer " + token() }, cache: "no-store", credentials: "omit" };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(path, init);
  }

  function errorText(res) {
    return res.json().then(function (b) {
      return (b && (b.message || b.error)) || ("HTTP " + res.status);
    }, function () { return "HTTP " + res.status; });
  }

  // --- sign in / out -------------------------------------------------------

  function showLogin(message) {
    stop();
    signIns++;
    sessionStorage.removeItem(TOKEN_KEY);
    $("login").hidden = false;
    $("events").hidden = true;
    $("signout").hidden = true;
    $("readonly").hidden = true;
    $("refusals").hidden = true;
    $("conn").textContent = "";
    $("login-error").textContent = message || "";
    $("token").value = "";
    $("token").focus();
  }

  function start() {
    signIns++;
    $("login").hidden = true;
    $("events").hidden = false;
    $("signout").hidden = false;
    $("conn").textContent = "Connecting…";
    learnRole();
    poll();
  }

  function stop() {
    if (timer) clearTimeout(timer);
    timer = null;
    pollGen++;
  }

  // A server with named tokens says the role at /admin/whoami; one without
  // it (404) has a single full admin token. A 403 on a control also hides
  // the controls, so a read-only token never sees buttons that cannot work.
  function learnRole() {
    // Dropped once its sign-in is over, like a poll's answer: a late role
    // of the last token would hide the next operator's controls, or show
    // a read-only one controls that cannot work.
    var mine = signIns;
    api("GET", "/admin/whoami").then(function (res) {
      if (!res.ok) return null;
      return res.json();
    }).then(function (me) {
      if (mine !== signIns) return;
      if (me && typeof me.role === "string") setReadOnly(me.role !== "admin");
    }, function () {});
  }

  function setReadOnly(ro) {
    readOnly = ro;
    $("readonly").hidden = !ro;
    Object.keys(cards).forEach(function (id) { cards[id].controls.hidden = ro; });
  }

  // --- polling -------------------------------------------------------------

  function poll() {
    stop();
    if (!token()) return;
    var mine = pollGen;
    api("GET", "/admin/events").then(function (res) {
      if (mine !== pollGen) return null;
      if (res.status === 401) { showLogin("That token was refused."); return null; }
      if (res.status === 429) {
        // Too many wrong tokens from this address: said as it is, not as
        // an unreachable API, and asked again once the refusal ends.
        var wait = parseInt(res.headers.get("Retry-After"), 10) || 60;
        $("conn").textContent = "Too many wrong tokens from this address: the admin API refuses it for "
          + wait + " s more";
        timer = setTimeout(poll, wait * 1000);
        return null;
      }
      if (!res.ok) throw new Error("HTTP " + res.status);
      return res.json();
    }).then(function (events) {
      if (!events || mine !== pollGen) return;
      lastOk = Date.now();
      render(events, lastOk);
      if (polls++ % REFUSALS_EVERY === 0) refusals();
      $("conn").textContent = "Live · updated " + new Date(lastOk).toLocaleTimeString();
      timer = setTimeout(poll, POLL_MS);
    }).catch(function () {
      if (mine !== pollGen) return;
      var since = lastOk ? " (last update " + new Date(lastOk).toLocaleTimeString() + ")" : "";
      $("conn").textContent = "Admin API unreachable, retrying" + since;
      timer = setTimeout(poll, POLL_MS * 2);
    });
  }

  // The tables stored through the admin API that this node refuses to run
  // (its config or key files differ from the other nodes'), with the
  // node's reason. A server without the endpoint (404) shows nothing.
  function refusals() {
    api("GET", "/admin/refusals").then(function (res) {
      return res.ok ? res.json() : null;
    }).then(function (view) {
      if (!view || !Array.isArray(view.refusals)) return;
      var list = $("refusals-list");
      list.textContent = "";
      view.refusals.forEach(function (r) {
        var since = new Date(r.since_ms).toLocaleTimeString();
        list.appendChild(el("li", "", r.event + ": " + r.reason + " (since " + since + ")"));
      });
      $("refusals").hidden = view.refusals.length === 0;
    }, function () {});
  }

  function record(ev, now) {
    var s = ev.stats;
    var h = history[ev.id] || (history[ev.id] = []);
    h.push({
      t: now,
      waiting: s.waiting,
      used: s.active + s.outstanding,
      max: s.max_active,
      rate: s.admission_rate_1m,
      p95: s.origin_p95_ms,
      err: s.origin_error_rate === null ? null : s.origin_error_rate * 100,
      bot: s.bot_share_1m === null ? null : s.bot_share_1m * 100,
      pow: s.pow_share_1m === null ? null : s.pow_share_1m * 100
    });
    while (h.length && h[0].t < now - WINDOW_MS) h.shift();
  }

  function render(events, now) {
    var seen = dict();
    events.forEach(function (ev) {
      seen[ev.id] = true;
      record(ev, now);
      var card = cards[ev.id] || (cards[ev.id] = buildCard(ev.id));
      update(card, ev, now);
    });
    Object.keys(cards).forEach(function (id) {
      if (!seen[id]) { cards[id].root.remove(); delete cards[id]; }
    });
    Object.keys(history).forEach(function (id) { if (!seen[id]) delete history[id]; });
    if (!events.length) $("conn").textContent = "No events configured";
    saveHistory(now);
  }

  // --- one event's card ----------------------------------------------------

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  var STATS = [
    ["waiting", "Waiting"], ["active", "Active"], ["outstanding", "Outstanding tokens"],
    ["capacity", "Capacity used"], ["rate", "Admissions / min"], ["eta", "Wait at the back"],
    ["p95", "Origin p95"], ["err", "Origin 5xx"], ["pow", "Proof-of-work share"],
    ["bot", "Bot share"], ["arrivals", "Arrivals / min"]
  ];

  var CHARTS = [
    ["queue", "Waiting", [["waiting", "waiting"]], ""],
    ["capacity", "Active + tokens vs max_active", [["used", "in use"], ["max", "max_active"]], ""],
    ["rate", "Admissions per minute", [["rate", "per min"]], ""],
    ["origin", "Origin p95 latency", [["p95", "p95"]], " ms"],
    ["errors", "Origin 5xx, bots, proof-of-work", [["err", "5xx"], ["bot", "bots"], ["pow", "PoW"]], " %"]
  ];

  function buildCard(id) {
    var root = el("section", "card event");
    var titleId = "ev-" + id;
    root.setAttribute("aria-labelledby", titleId);
    root.dataset.event = id;
    var head = el("div", "event-head");
    var title = el("h2", "", id);
    title.id = titleId;
    head.appendChild(title);
    var badges = el("span", "badges");
    head.appendChild(badges);
    root.appendChild(head);

    var dl = el("dl", "stats");
    var values = {};
    STATS.forEach(function (s) {
      var box = el("div");
      box.appendChild(el("dt", "", s[1]));
      var dd = el("dd");
      var value = el("span");
      value.dataset.stat = s[0];
      dd.appendChild(value);
      box.appendChild(dd);
      if (s[0] === "capacity") {
        var meter = el("meter");
        meter.min = 0;
        meter.setAttribute("aria-label", "Capacity used of " + id);
        dd.appendChild(meter);
        values.meter = meter;
      }
      values[s[0]] = value;
      dl.appendChild(box);
    });
    root.appendChild(dl);

    var charts = el("div", "charts");
    var figs = {};
    CHARTS.forEach(function (c) {
      var fig = el("figure");
      var cap = el("figcaption");
      cap.appendChild(el("span", "", c[1]));
      var legend = el("span", "legend");
      c[2].forEach(function (series, i) {
        legend.appendChild(el("span", "key-" + (i + 1), "▬ " + series[1] + " "));
      });
      cap.appendChild(legend);
      fig.appendChild(cap);
      var svg = document.createElementNS(SVG, "svg");
      svg.setAttribute("class", "chart");
      svg.setAttribute("viewBox", "0 0 900 100");
      svg.setAttribute("preserveAspectRatio", "none");
      svg.setAttribute("role", "img");
      [25, 50, 75].forEach(function (y) {
        var l = document.createElementNS(SVG, "line");
        l.setAttribute("x1", "0"); l.setAttribute("x2", "900");
        l.setAttribute("y1", String(y)); l.setAttribute("y2", String(y));
        svg.appendChild(l);
      });
      var lines = c[2].map(function (_, i) {
        var p = document.createElementNS(SVG, "polyline");
        p.setAttribute("class", "s" + (i + 1));
        svg.appendChild(p);
        return p;
      });
      fig.appendChild(svg);
      var axis = el("div", "axis");
      var from = el("span", "", "−15 min");
      axis.appendChild(from);
      var top = el("span", "", "");
      axis.appendChild(top);
      axis.appendChild(el("span", "", "now"));
      fig.appendChild(axis);
      charts.appendChild(fig);
      figs[c[0]] = { def: c, svg: svg, lines: lines, top: top, from: from };
    });
    root.appendChild(charts);

    var controls = el("div", "controls");
    controls.hidden = readOnly;
    var pause = el("button", "", "Pause");
    pause.type = "button";
    var resume = el("button", "", "Resume");
    resume.type = "button";
    var close = el("button", "danger", "Close event");
    close.type = "button";
    var label = el("label", "", "max_active");
    var input = el("input");
    input.type = "number";
    input.min = "1";
    input.step = "1";
    input.inputMode = "numeric";
    label.appendChild(input);
    var apply = el("button", "quiet", "Set max_active");
    apply.type = "button";
    var result = el("p", "result");
    result.setAttribute("role", "status");
    [pause, resume, close, label, apply, result].forEach(function (c) { controls.appendChild(c); });
    root.appendChild(controls);

    pause.addEventListener("click", function () {
      act(card, "Pause admissions of " + id + "?", "Visitors keep their places; nobody is admitted until you resume.", "pause");
    });
    resume.addEventListener("click", function () {
      act(card, "Resume admissions of " + id + "?", "Admissions restart at the next tick.", "resume");
    });
    close.addEventListener("click", function () {
      act(card, "Close " + id + "?", "No more joins or admissions. Closing is final until the event is reopened.", "close");
    });
    apply.addEventListener("click", function () { setMaxActive(card); });

    $("events").appendChild(root);
    var card = {
      id: id, root: root, badges: badges, values: values, figs: figs, controls: controls,
      input: input, result: result, buttons: { pause: pause, resume: resume, close: close }, last: null
    };
    return card;
  }

  function fmt(n, digits) {
    if (n === null || n === undefined || !isFinite(n)) return "–";
    return Number(n).toLocaleString("en", { maximumFractionDigits: digits || 0 });
  }

  function pct(share) { return share === null || share === undefined ? "–" : fmt(share * 100, 1) + " %"; }

  function duration(s) {
    if (s === null || s === undefined) return "–";
    if (s < 60) return s + " s";
    if (s < 3600) return Math.round(s / 60) + " min";
    return fmt(s / 3600, 1) + " h";
  }

  function badge(card, text, kind) {
    card.badges.appendChild(el("span", "badge " + kind, text));
  }

  function update(card, ev, now) {
    var s = ev.stats;
    card.last = ev;
    card.badges.textContent = "";
    var phaseKind = s.phase === "open" ? "ok" : s.phase === "closed" ? "bad" : "warn";
    badge(card, s.phase.replace("_", " "), phaseKind);
    if (ev.state === "paused" && s.phase !== "paused") badge(card, "paused", "warn");
    if (s.draining || !ev.reachable) badge(card, "draining", "bad");

    var v = card.values;
    v.waiting.textContent = fmt(s.waiting);
    v.active.textContent = fmt(s.active);
    v.outstanding.textContent = fmt(s.outstanding);
    var used = s.active + s.outstanding;
    v.capacity.textContent = fmt(used) + " / " + fmt(s.max_active);
    v.meter.max = Math.max(1, s.max_active);
    v.meter.value = Math.min(used, v.meter.max);
    v.rate.textContent = fmt(s.admission_rate_1m);
    v.eta.textContent = duration(s.eta_back_of_queue_seconds);
    v.p95.textContent = s.origin_p95_ms === null ? "–" : fmt(s.origin_p95_ms) + " ms";
    v.err.textContent = pct(s.origin_error_rate);
    v.pow.textContent = pct(s.pow_share_1m);
    v.bot.textContent = pct(s.bot_share_1m);
    v.arrivals.textContent = fmt(s.arrivals_1m);

    card.buttons.pause.disabled = ev.state !== "running";
    card.buttons.resume.disabled = ev.state !== "paused";
    card.buttons.close.disabled = ev.state === "closed";
    if (document.activeElement !== card.input && !card.input.value) card.input.placeholder = String(s.max_active);

    var h = history[ev.id] || [];
    Object.keys(card.figs).forEach(function (k) { draw(card.figs[k], h, now, ev.id); });
  }

  function draw(fig, h, now, id) {
    var keys = fig.def[2].map(function (s) { return s[0]; });
    var unit = fig.def[3];
    var max = 0;
    h.forEach(function (p) { keys.forEach(function (k) { if (p[k] !== null && p[k] > max) max = p[k]; }); });
    var scale = niceMax(max);
    // The x axis spans the history held, up to 15 minutes (at least 30 s),
    // so a freshly opened dashboard does not draw in its last pixels.
    var span = Math.min(WINDOW_MS, Math.max(30000, h.length ? now - h[0].t : 0));
    fig.from.textContent = "−" + duration(Math.round(span / 1000));
    fig.lines.forEach(function (line, i) {
      var pts = [];
      h.forEach(function (p) {
        var y = p[keys[i]];
        if (y === null || y === undefined) return;
        var x = 900 - ((now - p.t) / span) * 900;
        pts.push(x.toFixed(1) + "," + (100 - (y / scale) * 96 - 2).toFixed(1));
      });
      line.setAttribute("points", pts.join(" "));
    });
    fig.top.textContent = "max " + fmt(scale, 1) + unit;
    var latest = h.length ? h[h.length - 1] : null;
    var now_text = keys.map(function (k, i) {
      return fig.def[2][i][1] + " " + (latest && latest[k] !== null ? fmt(latest[k], 1) + unit : "no data");
    }).join(", ");
    fig.svg.setAttribute("aria-label", fig.def[1] + " of " + id + " over the last " + duration(Math.round(span / 1000)) + "; now " + now_text);
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) if (v <= steps[i] * p) return steps[i] * p;
    return 10 * p;
  }

  // --- controls --------------------------------------------------------------

  function confirmAction(title, text) {
    var dialog = $("confirm");
    $("confirm-title").textContent = title;
    $("confirm-text").textContent = text;
    return new Promise(function (resolve) {
      dialog.addEventListener("close", function done() {
        dialog.removeEventListener("close", done);
        resolve(dialog.returnValue === "ok");
      });
      dialog.returnValue = "";
      dialog.showModal();
      $("confirm-ok").focus();
    });
  }

  function answered(card, res, what) {
    if (res.ok) {
      card.result.textContent = what + " done at " + new Date().toLocaleTimeString() + ".";
      poll();
      return true;
    }
    if (res.status === 401) { showLogin("That token was refused."); return true; }
    if (res.status === 403) setReadOnly(true);
    return errorText(res).then(function (msg) {
      card.result.textContent = what + " refused: " + msg;
      return true;
    });
  }

  function act(card, title, text, verb) {
    confirmAction(title, text).then(function (ok) {
      if (!ok) return;
      var label = verb.charAt(0).toUpperCase() + verb.slice(1);
      return api("POST", "/admin/events/" + encodeURIComponent(card.id) + "/" + verb)
        .then(function (res) { return answered(card, res, label); });
    }).catch(function () { card.result.textContent = "The admin API could not be reached."; });
  }

  function setMaxActive(card) {
    var n = Number(card.input.value);
    if (!Number.isInteger(n) || n < 1) {
      card.result.textContent = "max_active must be a whole number of at least 1.";
      card.input.focus();
      return;
    }
    var was = card.last ? card.last.stats.max_active : "?";
    confirmAction("Set max_active of " + card.id + " to " + n + "?", "It is " + was + " now. The change applies on every node within seconds.")
      .then(function (ok) {
        if (!ok) return;
        var path = "/admin/events/" + encodeURIComponent(card.id);
        return api("PATCH", path, { max_active: n }).then(function (res) {
          // A node without PATCH (an older version during a rolling upgrade)
          // answers 405: send the event as it stands with only max_active changed.
          if (res.status !== 405 || !card.last) return res;
          var doc = JSON.parse(JSON.stringify(card.last.config));
          doc.max_active = n;
          return api("PUT", path, doc);
        }).then(function (res) {
          card.input.value = "";
          return answered(card, res, "max_active " + n);
        });
      }).catch(function () { card.result.textContent = "The admin API could not be reached."; });
  }

  // --- start -----------------------------------------------------------------

  window.addEventListener("pagehide", function () { saveHistory(); });

  document.addEventListener("DOMContentLoaded", function () {
    $("login-form").addEventListener("submit", function (e) {
      e.preventDefault();
      var t = $("token").value.trim();
      if (!t) return;
      sessionStorage.setItem(TOKEN_KEY, t);
      $("token").value = "";
      $("login-error").textContent = "";
      start();
    });
    $("signout").addEventListener("click", function () {
      sessionStorage.removeItem(HISTORY_KEY);
      history = dict();
      Object.keys(cards).forEach(function (id) { cards[id].root.remove(); });
      cards = dict();
      showLogin("");
    });
    if (token()) start(); else showLogin("");
  });
})();
