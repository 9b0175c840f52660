/* Anteroom waiting page script.
 *
 * Joins the queue, follows the push stream (Server-Sent Events) or, when the
 * stream is refused or fails, polls the position with jitter (paused while
 * the tab is hidden), solves proof-of-work in a Web Worker when the server
 * asks, and on admission redeems the token and goes to the return path. Everything it says
 * comes from the JSON block the server rendered (`#anteroom-config`), in the
 * visitor's language; the page is complete without this script.
 */
(function () {
  'use strict';

  var configEl = document.getElementById('anteroom-config');
  if (!configEl) return;
  var config = JSON.parse(configEl.textContent);
  var t = config.messages;
  var api = config.api;
  var query = '?eventId=' + encodeURIComponent(config.eventId);
  var numberFormat = new Intl.NumberFormat(config.lang);

  // A crowd arrives together (a redirect wave); spreading the first poll over
  // 0-3 s keeps it from polling in lockstep ever after.
  var FIRST_POLL_SPREAD_MS = 3000;
  // queue_idle_timeout defaults to 5 min: a hidden tab still checks in this
  // often so the visitor does not lose the place by switching tabs.
  var HIDDEN_KEEPALIVE_MS = 120000;
  var MAX_BACKOFF_MS = 30000;
  // A stream that was refused (the node holds all it may) or never
  // delivered is tried again this long after, doubling up to the cap; the
  // page polls meanwhile. One that worked and ended (its lifetime, a
  // restart) is reopened after one poll.
  var STREAM_RETRY_MS = 30000;
  var MAX_STREAM_RETRY_MS = 300000;
  // Enter does not join before the pre-window; a page open then joins when
  // it opens, at a random moment within its first 5 s (or quarter, if
  // shorter) so open pages do not all join in one instant. Every pre-window
  // arrival is shuffled, so the spread costs nobody a place. Same bound as
  // the server's no-JavaScript refresh (view.rs PRE_WINDOW_SPREAD_MS).
  var PRE_WINDOW_SPREAD_MS = 5000;
  // Browsers run a timer set further ahead than 2^31 - 1 ms (24.8 days) at
  // once: a longer wait is made of timers this long.
  var LONGEST_TIMER_MS = 2147483647;
  // A stream that ended after it had delivered (its node stopped, its
  // lifetime ran out) is followed by a poll this long after, at random:
  // every stream of a stopping node ends at once, and the pages must not
  // come back to the other nodes together.
  var STREAM_ENDED_SPREAD_MS = 10000;
  // A paused bar stops short of full: full means it is the visitor's turn.
  var PAUSED_PROGRESS_MAX = 99;
  // A screen reader is told a new place in line or a new estimate at most
  // this often (see announce()).
  var ANNOUNCE_EVERY_MS = 30000;

  var el = {
    heading: document.getElementById('ar-heading'),
    hint: document.getElementById('ar-hint'),
    status: document.getElementById('ar-status'),
    headline: document.getElementById('ar-headline'),
    detail: document.getElementById('ar-detail'),
    eta: document.getElementById('ar-eta'),
    notice: document.getElementById('ar-notice'),
    announce: document.getElementById('ar-announce'),
    countdown: document.getElementById('ar-countdown'),
    progress: document.getElementById('ar-progress'),
    cont: document.getElementById('ar-continue')
  };

  var timer = null;
  // Whether the pending timer is a back-off the server or a failure asked
  // for (a 429's Retry-After, a network error): a tab coming back into view
  // brings an ordinary poll forward, never one of those.
  var timerIsBackoff = false;
  var countdownTimer = null;
  var firstPoll = true;
  var failures = 0;
  var redeeming = false;
  var lastContact = Date.now();
  var stream = null;
  var streamRetryAt = 0;
  var streamFailures = 0;
  // Set while enter has answered before the pre-window (so the visitor is
  // not in the queue): cleared by the next enter that succeeds.
  var outside = false;
  var joinTimer = null;
  // How the page learnt its position: exposed for the browser tests and
  // for operators' debugging.
  var transport = window.anteroomTransport = { streams: 0, streamMessages: 0, polls: 0 };

  function fill(template, values) {
    return template.replace(/\{(\w+)\}/g, function (m, key) {
      return Object.prototype.hasOwnProperty.call(values, key) ? values[key] : m;
    });
  }

  function setText(node, text) {
    if (!node) return;
    // Writing the same text again would make screen readers repeat it.
    if (node.textContent !== (text || '')) node.textContent = text || '';
    node.hidden = !text;
  }

  // Same rule as the server (page/lang.rs is_one): English "1 person" but
  // "0 people"; French "0 personne", "1 personne", "2 personnes".
  function isOne(n) {
    return config.lang === 'fr' ? n < 2 : n === 1;
  }

  function jitter(ms) {
    return ms * (0.8 + Math.random() * 0.4);
  }

  /* ---- rendering ---- */

  function duration(seconds) {
    var h = Math.floor(seconds / 3600), m = Math.floor(seconds / 60) % 60, s = seconds % 60;
    var pad = function (n) { return (n < 10 ? '0' : '') + n; };
    if (h > 0) return h + ' h ' + pad(m) + ' min';
    if (m > 0) return m + ' min ' + pad(s) + ' s';
    return s + ' s';
  }

  function setProgress(percent) {
    if (percent === null) {
      el.progress.removeAttribute('value');
    } else {
      el.progress.value = percent;
      el.progress.textContent = percent + '%';
    }
  }

  function progressOf(rank, length) {
    if (typeof rank !== 'number' || typeof length !== 'number') return null;
    if (length === 0) return 100;
    return Math.floor((length - Math.min(rank, length)) * 100 / length);
  }

  // The <h1> fits the state: nobody is told "you are in line" before they
  // are (same choice as view.rs).
  function headingOf(status) {
    if (status === 'WAITING' || status === 'PAUSED') return t.heading;
    if (status === 'NOT_OPEN') return t.headingNotOpen;
    if (status === 'ADMITTED') return t.headingAdmitted;
    if (status === 'ACTIVE') return t.headingActive;
    if (status === 'CLOSED') return t.headingClosed;
    return t.headingOutside;
  }

  // What the live region said last. The served page is what a reader
  // finds on arrival, so it counts as said when the script starts.
  function shown(node) {
    return node && !node.hidden ? node.textContent : '';
  }
  var said = {
    status: el.status ? el.status.getAttribute('data-status') || '' : '',
    text: [shown(el.headline), shown(el.eta), shown(el.notice)]
      .filter(function (s) { return s; }).join(' '),
    notice: shown(el.notice),
    at: Date.now()
  };

  // Tells screen readers what changed, and only what matters to them. The
  // visible block changes with every poll or push message (near the front
  // each admission moves the visitor up, and the line's length changes
  // with every arrival), and a live region re-reads all of itself at each
  // change: made live, it would talk over everything else the visitor
  // does. So the region below it says the headline, the estimate and the
  // notice, never the line's length: at once when the status or the notice
  // changes or the visitor reaches the front, otherwise at most once per
  // ANNOUNCE_EVERY_MS, with the latest place at the first message after
  // the window.
  function announce(status, headline, eta, notice) {
    if (!el.announce) return;
    var text = [headline, eta, notice].filter(function (s) { return s; }).join(' ');
    if (text === said.text) return;
    var now = Date.now();
    var urgent = status !== said.status || (notice || '') !== said.notice || headline === t.next;
    said.status = status;
    said.notice = notice || '';
    if (!urgent && now - said.at < ANNOUNCE_EVERY_MS) return;
    said.text = text;
    said.at = now;
    // Never hidden: a region shown and filled at once is not announced by
    // every screen reader.
    el.announce.textContent = text;
  }

  function show(status, headline, detail, eta, notice) {
    el.status.setAttribute('data-status', status || '');
    setText(el.heading, headingOf(status));
    // "Keep this page open" is not true once there is nothing to wait for.
    if (el.hint) el.hint.hidden = status === 'CLOSED' || status === 'ACTIVE' || status === 'BLOCKED';
    setText(el.headline, headline);
    setText(el.detail, detail);
    setText(el.eta, eta);
    setText(el.notice, notice);
    announce(status || '', headline, eta, notice);
  }

  function message(text) {
    setText(el.notice, text);
    announce(said.status, shown(el.headline), shown(el.eta), text);
  }

  function stopCountdown() {
    if (countdownTimer) clearInterval(countdownTimer);
    countdownTimer = null;
    setText(el.countdown, '');
  }

  // The countdown ticks every second in a role="timer" element, which screen
  // readers do not announce; the live region only changes with the status.
  function startCountdown(pos) {
    var remainingMs = null;
    if (pos.opensAt && pos.timestamp) {
      // Server time difference, so a wrong client clock does not matter.
      remainingMs = Date.parse(pos.opensAt) - Date.parse(pos.timestamp);
    } else if (typeof pos.estimatedWaitSeconds === 'number') {
      remainingMs = pos.estimatedWaitSeconds * 1000;
    }
    if (remainingMs === null || isNaN(remainingMs)) { stopCountdown(); return; }
    var deadline = Date.now() + Math.max(0, remainingMs);
    var tick = function () {
      var left = Math.max(0, Math.ceil((deadline - Date.now()) / 1000));
      setText(el.countdown, fill(t.countdown, { time: duration(left) }));
    };
    tick();
    if (!countdownTimer) countdownTimer = setInterval(tick, 1000);
  }

  function render(pos) {
    var status = pos.status;
    if (status !== 'NOT_OPEN') stopCountdown();
    if (status === 'WAITING' || status === 'PAUSED') {
      var paused = status === 'PAUSED';
      var rank = pos.rank;
      var headline = rank === 0 ? t.next
        : fill(t.position, { position: numberFormat.format((rank || 0) + 1) });
      var detail = typeof pos.queueLength === 'number'
        ? fill(isOne(pos.queueLength) ? t.queueLengthOne : t.queueLength,
          { count: numberFormat.format(pos.queueLength) }) : '';
      var eta;
      if (paused) {
        // Nobody moves while paused: no "almost there".
        eta = t.etaPaused;
      } else if (rank === 0 || (typeof pos.estimatedWaitSeconds === 'number' && pos.estimatedWaitSeconds < 60)) {
        eta = t.almostThere;
      } else {
        eta = pos.display ? fill(t.eta, { display: pos.display }) : t.etaUnknown;
      }
      show(status, headline, detail, eta, paused ? t.paused : '');
      var percent = progressOf(rank, pos.queueLength);
      setProgress(paused && percent !== null ? Math.min(percent, PAUSED_PROGRESS_MAX) : percent);
    } else if (status === 'NOT_OPEN') {
      show(status, t.notOpen, '', '', '');
      setProgress(null);
      startCountdown(pos);
    } else if (status === 'ADMITTED') {
      show(status, t.admitted, '', '', '');
      setProgress(100);
    } else if (status === 'ACTIVE') {
      show(status, t.active, '', '', '');
      setProgress(100);
    } else if (status === 'CLOSED') {
      show(status, t.closed, '', '', '');
    } else if (status === 'DRAINING') {
      show(status, t.draining, '', '', '');
    } else {
      show(status, t.joining, '', '', '');
    }
  }

  /* ---- scheduling ---- */

  function schedule(ms) {
    if (timer) clearTimeout(timer);
    timerIsBackoff = false;
    timer = setTimeout(tick, Math.min(LONGEST_TIMER_MS, Math.max(0, ms)));
  }

  function scheduleNext(pollAfterMs) {
    var delay = jitter(pollAfterMs > 0 ? pollAfterMs : 3000);
    if (firstPoll) {
      delay += Math.random() * FIRST_POLL_SPREAD_MS;
      firstPoll = false;
    }
    schedule(delay);
  }

  function backoff(retryAfterSeconds) {
    failures++;
    var ms = retryAfterSeconds > 0 ? retryAfterSeconds * 1000
      : Math.min(MAX_BACKOFF_MS, 1000 * Math.pow(2, failures));
    schedule(jitter(ms));
    timerIsBackoff = true;
  }

  function tick() {
    timer = null;
    if (document.hidden && Date.now() - lastContact < HIDDEN_KEEPALIVE_MS) {
      // Resumed by visibilitychange; the keep-alive check runs again later.
      schedule(HIDDEN_KEEPALIVE_MS);
      return;
    }
    poll();
  }

  document.addEventListener('visibilitychange', function () {
    if (!document.hidden && !redeeming && timer && !timerIsBackoff) {
      schedule(Math.random() * 1000);
    }
  });

  /* ---- talking to the server ---- */

  function retryAfter(resp) {
    var value = parseInt(resp.headers.get('Retry-After') || '', 10);
    return isNaN(value) ? 0 : value;
  }

  function call(method, path, body) {
    var init = { method: method, credentials: 'same-origin', headers: { 'Accept': 'application/json' } };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    return fetch(api + path + query, init).then(function (resp) {
      lastContact = Date.now();
      return resp.json().catch(function () { return {}; }).then(function (json) {
        return { resp: resp, json: json };
      });
    });
  }

  function enter(answer) {
    // While a challenge is being solved an enter without its answer would
    // only be handed another challenge (and, before, crossed the answers).
    if (solving && !answer) return Promise.resolve();
    return call('POST', '/enter', answer).then(function (r) {
      if (r.resp.status === 200) outside = false;
      return handle(r);
    }, networkError);
  }

  // A NOT_OPEN answer from before the pre-window: the visitor is not in the
  // queue (enter does not join then). Joins once the pre-window opens, timed
  // on the server's clock (`timestamp`), so a wrong client clock does not
  // matter; a poll later inside the pre-window, while still outside (the
  // planned enter was refused), joins at once.
  function planPreWindowJoin(pos) {
    if (pos.status !== 'NOT_OPEN' || !pos.preWindowStartsAt || !pos.timestamp) return;
    var untilStart = Date.parse(pos.preWindowStartsAt) - Date.parse(pos.timestamp);
    if (isNaN(untilStart)) return;
    if (untilStart > 0) outside = true;
    if (!outside || joinTimer) return;
    var windowMs = Date.parse(pos.opensAt) - Date.parse(pos.preWindowStartsAt);
    var spread = isNaN(windowMs) ? 0 : Math.min(PRE_WINDOW_SPREAD_MS, Math.max(0, windowMs) / 4);
    var delay = Math.max(0, untilStart) + Math.random() * spread;
    joinTimer = setTimeout(function () {
      joinTimer = null;
      // The next poll plans again from the server's clock.
      if (delay > LONGEST_TIMER_MS) return;
      if (!redeeming) enter();
    }, Math.min(LONGEST_TIMER_MS, delay));
  }

  function poll() {
    transport.polls++;
    return call('GET', '/position').then(handle, networkError);
  }

  /* ---- push stream ---- */

  function closeStream() {
    if (stream) stream.close();
    stream = null;
  }

  // Opens the stream unless one is open, the browser has no EventSource or
  // a failed one is not due again. Returns whether the page now follows a
  // stream (and so does not poll).
  function openStream() {
    if (stream) return true;
    if (typeof EventSource === 'undefined' || Date.now() < streamRetryAt) return false;
    var es;
    try {
      es = new EventSource(api + '/stream' + query);
    } catch (e) {
      return false;
    }
    stream = es;
    transport.streams++;
    var delivered = false;
    es.addEventListener('position', function (event) {
      if (stream !== es) return;
      var pos;
      try { pos = JSON.parse(event.data); } catch (e) { return; }
      delivered = true;
      streamFailures = 0;
      failures = 0;
      lastContact = Date.now();
      transport.streamMessages++;
      // The stream replaces the poll loop while it lasts.
      if (timer) { clearTimeout(timer); timer = null; }
      onStreamPosition(pos);
    });
    es.onerror = function () {
      // EventSource would reconnect by itself; the page decides instead.
      if (stream !== es) return;
      closeStream();
      if (redeeming) return;
      if (delivered) {
        streamRetryAt = 0;
        schedule(1000 + Math.random() * STREAM_ENDED_SPREAD_MS);
      } else {
        streamFailures++;
        streamRetryAt = Date.now() +
          jitter(Math.min(MAX_STREAM_RETRY_MS, STREAM_RETRY_MS * Math.pow(2, streamFailures - 1)));
        schedule(0);
      }
    };
    return true;
  }

  function onStreamPosition(pos) {
    render(pos);
    planPreWindowJoin(pos);
    var status = pos.status;
    if (status === 'ADMITTED' && pos.token) {
      try { sessionStorage.setItem('anteroomAdmitted', 'stream ' + Date.now()); } catch (e) { /* private mode */ }
      closeStream();
      return redeem(pos.token);
    }
    if (status === 'NONE') { closeStream(); return enter(); }
    if (status === 'ACTIVE') { closeStream(); return leave(); }
    if (status === 'CLOSED') { closeStream(); }
  }

  function networkError() {
    message(t.retrying);
    backoff(0);
  }

  function handle(r) {
    var resp = r.resp, json = r.json;
    if (resp.status === 200) {
      failures = 0;
      return onPosition(json);
    }
    if (resp.status === 401 && json && json.challenge && json.challenge.captcha) {
      return askCaptcha(json.challenge);
    }
    if (resp.status === 401 && json && json.challenge) {
      return solve(json.challenge);
    }
    if (resp.status === 429) {
      message(t.rateLimited);
      return backoff(retryAfter(resp));
    }
    if (resp.status === 503) {
      show('DRAINING', t.draining, '', '', '');
      return backoff(retryAfter(resp));
    }
    if (resp.status === 403) {
      show('BLOCKED', t.blocked, '', '', '');
      return;
    }
    message(t.retrying);
    backoff(retryAfter(resp));
  }

  function onPosition(pos) {
    render(pos);
    planPreWindowJoin(pos);
    if (pos.status === 'NONE') {
      // Not (or no longer) in the queue, e.g. idled out: join again.
      return enter();
    }
    if (pos.status === 'ADMITTED' && pos.token) {
      try { sessionStorage.setItem('anteroomAdmitted', 'poll ' + Date.now()); } catch (e) { /* private mode */ }
      return redeem(pos.token);
    }
    if (pos.status === 'ACTIVE') return leave();
    if (pos.status === 'CLOSED') return;
    // The stream's first message is the position: no poll while it lasts.
    if (openStream()) return;
    scheduleNext(pos.pollAfterMs);
  }

  function redeem(token) {
    redeeming = true;
    return call('POST', '/redeem', { token: token }).then(function (r) {
      if (r.resp.status === 200) return leave();
      redeeming = false;
      if (r.json && r.json.error === 'event_paused') {
        // The line paused between the admission and the redeem: the token
        // waits with the visitor, and is tried again when the server says
        // (not through the position, which would say "your turn" again
        // and again while the pause lasts).
        show('PAUSED', t.paused, '', '', '');
        if (timer) clearTimeout(timer);
        timerIsBackoff = true;
        timer = setTimeout(function () {
          timer = null;
          redeem(token);
        }, jitter((retryAfter(r.resp) || 5) * 1000));
        return;
      }
      // A used or expired token: the position endpoint says what is true now
      // (ACTIVE if another tab redeemed it, WAITING again otherwise).
      scheduleNext(1000);
    }, function () {
      redeeming = false;
      networkError();
    });
  }

  function leave() {
    redeeming = true;
    location.replace(config.returnPath);
  }

  /* ---- proof of work ---- */

  var worker = null;
  var solving = false;

  // One challenge at a time: a second one while the first is solved (an
  // enter that was already under way) is left, or the two jobs' answers
  // would cross.
  function solve(challenge) {
    if (solving) return;
    // The headline may say it already (the server's render of the check).
    message(el.headline && el.headline.textContent === t.checking ? '' : t.checking);
    if (typeof Worker === 'undefined') {
      message(t.blocked);
      return;
    }
    var failed = function () {
      // The worker did not load (a refused request in a crowd) or broke:
      // a new one is made for the next challenge.
      if (worker) worker.terminate();
      worker = null;
      solving = false;
      message(t.retrying);
      backoff(0);
    };
    try {
      if (!worker) worker = new Worker(config.worker);
    } catch (e) {
      return failed();
    }
    solving = true;
    worker.onerror = failed;
    worker.onmessage = function (event) {
      solving = false;
      var result = event.data || {};
      if (result.error || typeof result.nonce !== 'number') {
        message(t.retrying);
        backoff(0);
        return;
      }
      // Exposed for the browser tests and for operators' debugging.
      window.anteroomLastPow = result;
      message('');
      enter({ challenge: challenge.challenge, nonce: result.nonce });
    };
    worker.postMessage({ challenge: challenge.challenge, difficulty: challenge.difficulty });
  }

  // A CAPTCHA (a high-risk visitor on an event with high_risk = "captcha"):
  // this page shows no provider's widget (it loads nothing from elsewhere),
  // so it says a check is needed and asks again of nobody, instead of
  // answering the demand as if it were proof of work, over and over. An
  // operator's page that shows the widget listens for `anteroom:captcha`
  // (its `detail` is the challenge: `captcha.siteKey`, `reason`) and hands
  // the provider's token to `window.anteroomCaptcha(token)`.
  function askCaptcha(challenge) {
    message(t.captcha);
    var detail = { captcha: challenge.captcha, reason: challenge.reason };
    var ev;
    try {
      ev = new CustomEvent('anteroom:captcha', { detail: detail });
    } catch (e) {
      return;
    }
    document.dispatchEvent(ev);
  }

  window.anteroomCaptcha = function (token) {
    if (typeof token !== 'string' || !token) return;
    message(t.checking);
    enter({ captchaToken: token });
  };

  /* ---- start ---- */

  if (config.position) render(config.position);
  enter();
})();
