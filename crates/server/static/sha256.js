/* Anteroom: a small pure-JavaScript SHA-256 (FIPS 180-4).
 *
 * The proof-of-work worker's engine: for inputs as short as a challenge and
 * its nonce it outruns WebCrypto, whose digest is a promise a hash (and a
 * plain-http origin that is not localhost has no crypto.subtle at all).
 * Works in a page, a Web Worker and Node alike: it only attaches
 * `AnteroomSha256` to globalThis.
 */
(function (root) {
  'use strict';

  var K = new Uint32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
  ]);
  // One message schedule, reused: the worker hashes millions of short inputs.
  var W = new Uint32Array(64);

  function compress(H, block, offset) {
    var i, t1, t2, x, y;
    for (i = 0; i < 16; i++) {
      var j = offset + i * 4;
      W[i] = (block[j] << 24) | (block[j + 1] << 16) | (block[j + 2] << 8) | block[j + 3];
    }
    for (i = 16; i < 64; i++) {
      x = W[i - 15];
      y = W[i - 2];
      W[i] = (((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3)) +
        W[i - 7] + (((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10)) + W[i - 16];
    }
    var a = H[0], b = H[1], c = H[2], d = H[3], e = H[4], f = H[5], g = H[6], h = H[7];
    for (i = 0; i < 64; i++) {
      t1 = (h + (((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))) +
        ((e & f) ^ (~e & g)) + K[i] + W[i]) | 0;
      t2 = ((((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))) +
        ((a & b) ^ (a & c) ^ (b & c))) | 0;
      h = g; g = f; f = e; e = (d + t1) | 0;
      d = c; c = b; b = a; a = (t1 + t2) | 0;
    }
    H[0] += a; H[1] += b; H[2] += c; H[3] += d;
    H[4] += e; H[5] += f; H[6] += g; H[7] += h;
  }

  /** SHA-256 of a Uint8Array, as a 32-byte Uint8Array. */
  function sha256(bytes) {
    var H = new Uint32Array([
      0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19
    ]);
    var len = bytes.length;
    var full = len - (len % 64);
    for (var off = 0; off < full; off += 64) compress(H, bytes, off);
    // Padding: 0x80, zeros, then the bit length as a 64-bit big-endian integer.
    var tailLen = len - full;
    var tail = new Uint8Array(tailLen < 56 ? 64 : 128);
    tail.set(bytes.subarray(full));
    tail[tailLen] = 0x80;
    var bits = len * 8;
    var hi = Math.floor(bits / 0x100000000);
    var n = tail.length;
    tail[n - 8] = hi >>> 24; tail[n - 7] = hi >>> 16; tail[n - 6] = hi >>> 8; tail[n - 5] = hi;
    tail[n - 4] = bits >>> 24; tail[n - 3] = bits >>> 16; tail[n - 2] = bits >>> 8; tail[n - 1] = bits;
    for (off = 0; off < n; off += 64) compress(H, tail, off);
    var out = new Uint8Array(32);
    for (var i = 0; i < 8; i++) {
      out[i * 4] = H[i] >>> 24; out[i * 4 + 1] = H[i] >>> 16;
      out[i * 4 + 2] = H[i] >>> 8; out[i * 4 + 3] = H[i];
    }
    return out;
  }

  /** UTF-8 bytes of a string (TextEncoder where present). */
  function utf8(str) {
    if (typeof TextEncoder !== 'undefined') return new TextEncoder().encode(str);
    var s = unescape(encodeURIComponent(str));
    var out = new Uint8Array(s.length);
    for (var i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out;
  }

  function hex(bytes) {
    var s = '';
    for (var i = 0; i < bytes.length; i++) s += (bytes[i] < 16 ? '0' : '') + bytes[i].toString(16);
    return s;
  }

  root.AnteroomSha256 = { sha256: sha256, utf8: utf8, hex: hex };
})(typeof globalThis !== 'undefined' ? globalThis : self);
