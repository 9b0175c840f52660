/* Anteroom: proof-of-work for the waiting page.
 *
 * Find a decimal nonce such that SHA-256("<challenge>:<nonce>") starts with at
 * least `difficulty` zero bits (API.md, "Proof-of-work challenge").
 *
 * One file, three hosts: as a Web Worker it answers {challenge, difficulty}
 * messages; in a page or under Node it only attaches `AnteroomPow` to
 * globalThis, so the test suite checks the very functions the browser runs
 * against the shared vectors (crates/core/testdata/vectors.json).
 */
(function (root) {
  'use strict';

  // Concurrent WebCrypto digests per await: each digest is a promise, and
  // awaiting them one by one spends more time in the event loop than hashing.
  var SUBTLE_BATCH = 512;

  function hasSubtle() {
    return !!(root.crypto && root.crypto.subtle && typeof root.crypto.subtle.digest === 'function');
  }

  function fallback() {
    if (!root.AnteroomSha256 && typeof root.importScripts === 'function') {
      // Resolved against this worker's URL: /_anteroom/sha256.js.
      root.importScripts('sha256.js');
    }
    if (!root.AnteroomSha256) throw new Error('sha256.js is not loaded');
    return root.AnteroomSha256;
  }

  function utf8(str) {
    return new TextEncoder().encode(str);
  }

  /** Number of leading zero bits of a byte array. */
  function leadingZeroBits(bytes) {
    var bits = 0;
    for (var i = 0; i < bytes.length; i++) {
      var b = bytes[i];
      if (b === 0) { bits += 8; continue; }
      while ((b & 0x80) === 0) { bits++; b <<= 1; }
      break;
    }
    return bits;
  }

  function hex(bytes) {
    var s = '';
    for (var i = 0; i < bytes.length; i++) s += (bytes[i] < 16 ? '0' : '') + bytes[i].toString(16);
    return s;
  }

  /** SHA-256 of a string: WebCrypto when present (unless `opts.engine` is 'js'), else sha256.js. */
  function digest(str, opts) {
    var bytes = utf8(str);
    if (hasSubtle() && !(opts && opts.engine === 'js')) {
      return root.crypto.subtle.digest('SHA-256', bytes).then(function (buf) { return new Uint8Array(buf); });
    }
    return Promise.resolve(fallback().sha256(bytes));
  }

  /** Checks one answer, as the server does: {hashHex, leadingZeroBits, valid}. */
  function check(challenge, nonce, difficulty, opts) {
    return digest(challenge + ':' + nonce, opts).then(function (hash) {
      var bits = leadingZeroBits(hash);
      return { hashHex: hex(hash), leadingZeroBits: bits, valid: bits >= difficulty };
    });
  }

  // The input "<challenge>:<nonce>" is built in one reused buffer: the prefix
  // is encoded once and only the ASCII digits of the nonce change.
  function Input(challenge) {
    this.prefix = utf8(challenge + ':');
    this.buf = new Uint8Array(this.prefix.length + 20);
    this.buf.set(this.prefix);
  }
  Input.prototype.bytes = function (nonce) {
    var digits = String(nonce);
    var p = this.prefix.length;
    for (var i = 0; i < digits.length; i++) this.buf[p + i] = digits.charCodeAt(i);
    return this.buf.subarray(0, p + digits.length);
  };

  function now() {
    return (root.performance && root.performance.now) ? root.performance.now() : Date.now();
  }

  /**
   * The engine a solve uses unless told: sha256.js. WebCrypto's digest is a
   * promise a hash, sent to another thread and back, and for an input this
   * short that costs more than the hash: in Chromium the JIT-compiled hash
   * solves three to four times as fast (docs/benchmarks.md, "Proof-of-work
   * solve time in the browser"). WebCrypto stays for a worker that could
   * not load sha256.js (a refused request in a crowd).
   */
  function preferred() {
    try {
      fallback();
      return 'js';
    } catch (err) {
      if (hasSubtle()) return 'webcrypto';
      throw err;
    }
  }

  /**
   * Solves a challenge: resolves {nonce, hashes, ms, engine}. `opts.engine`
   * ('js' or 'webcrypto') picks one; by default, see `preferred`.
   */
  async function solve(challenge, difficulty, opts) {
    // 2^40 hashes would take hours: a larger difficulty is a server bug, not work to do.
    if (!(difficulty >= 0 && difficulty <= 40)) throw new Error('unsupported difficulty ' + difficulty);
    var started = now();
    var input = new Input(challenge);
    var done = function (nonce, engine) {
      return { nonce: nonce, hashes: nonce + 1, ms: Math.round(now() - started), engine: engine };
    };
    var nonce;
    var engine = (opts && opts.engine) || preferred();
    // A misspelt engine would otherwise solve with sha256.js unnoticed.
    if (engine !== 'js' && engine !== 'webcrypto') throw new Error('unknown engine ' + engine);
    if (engine === 'webcrypto') {
      if (!hasSubtle()) throw new Error('WebCrypto is not available here');
      var subtle = root.crypto.subtle;
      for (var base = 0; ; base += SUBTLE_BATCH) {
        var pending = [];
        // digest() copies its input when called, so one buffer serves the batch.
        for (nonce = base; nonce < base + SUBTLE_BATCH; nonce++) {
          pending.push(subtle.digest('SHA-256', input.bytes(nonce)));
        }
        var hashes = await Promise.all(pending);
        for (var j = 0; j < hashes.length; j++) {
          if (leadingZeroBits(new Uint8Array(hashes[j])) >= difficulty) return done(base + j, 'webcrypto');
        }
      }
    }
    var sha = fallback();
    for (nonce = 0; ; nonce++) {
      if (leadingZeroBits(sha.sha256(input.bytes(nonce))) >= difficulty) return done(nonce, 'js');
    }
  }

  root.AnteroomPow = { leadingZeroBits: leadingZeroBits, digest: digest, check: check, solve: solve, hex: hex };

  var inWorker = typeof root.WorkerGlobalScope !== 'undefined' && root instanceof root.WorkerGlobalScope;
  if (inWorker) {
    root.onmessage = function (event) {
      var msg = event.data || {};
      var engine = msg.engine === 'js' || msg.engine === 'webcrypto' ? msg.engine : undefined;
      solve(String(msg.challenge), Number(msg.difficulty) | 0, { engine: engine })
        .then(function (result) { root.postMessage(result); })
        .catch(function (err) { root.postMessage({ error: String(err && err.message || err) }); });
    };
  }
})(typeof globalThis !== 'undefined' ? globalThis : self);
