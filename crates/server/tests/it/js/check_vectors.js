// Checks the waiting page's JavaScript (static/sha256.js, static/pow-worker.js)
// against the shared vectors, with WebCrypto and with the pure-JS fallback.
// Usage: node check_vectors.js <static dir> <vectors.json>. Run by tests/js_vectors.rs.
'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');

const [staticDir, vectorsPath] = process.argv.slice(2);
// Loaded as plain scripts into this global, exactly as a worker's importScripts would.
for (const file of ['sha256.js', 'pow-worker.js']) {
  vm.runInThisContext(fs.readFileSync(path.join(staticDir, file), 'utf8'), { filename: file });
}
const vectors = JSON.parse(fs.readFileSync(vectorsPath, 'utf8'));
const failures = [];
let checked = 0;

function expect(name, got, want) {
  checked++;
  if (got !== want) failures.push(`${name}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

(async () => {
  if (!Array.isArray(vectors.pow) || vectors.pow.length === 0) throw new Error('no pow vectors');
  if (!Array.isArray(vectors.sha256) || vectors.sha256.length === 0) throw new Error('no sha256 vectors');
  for (const [i, v] of vectors.sha256.entries()) {
    const S = globalThis.AnteroomSha256;
    expect(`sha256[${i}] js`, S.hex(S.sha256(S.utf8(v.input))), v.hex);
    const subtle = await globalThis.AnteroomPow.digest(v.input);
    expect(`sha256[${i}] webcrypto`, S.hex(subtle), v.hex);
  }
  for (const [i, v] of vectors.pow.entries()) {
    for (const engine of ['webcrypto', 'js']) {
      const got = await globalThis.AnteroomPow.check(v.challenge, v.nonce, v.difficulty, { engine });
      expect(`pow[${i}] ${engine} hash`, got.hashHex, v.hash_hex);
      expect(`pow[${i}] ${engine} leading_zero_bits`, got.leadingZeroBits, v.leading_zero_bits);
      expect(`pow[${i}] ${engine} valid`, got.valid, v.valid);
    }
    // The solver must find an answer the checker (and so the server) accepts.
    if (v.difficulty <= 16) {
      for (const engine of ['webcrypto', 'js', undefined]) {
        const solved = await globalThis.AnteroomPow.solve(v.challenge, v.difficulty, { engine });
        expect(`pow[${i}] solve(${engine}) engine`, solved.engine, engine || 'js');
        const ok = await globalThis.AnteroomPow.check(v.challenge, solved.nonce, v.difficulty, { engine });
        expect(`pow[${i}] solve(${engine}) valid`, ok.valid, true);
      }
    }
  }
  const bogus = await globalThis.AnteroomPow.solve('c', 1, { engine: 'bogus' }).then(
    () => 'solved',
    (err) => String(err && err.message),
  );
  expect('solve(bogus) refused', bogus, 'unknown engine bogus');
  console.log(JSON.stringify({ checked, failures }));
  process.exit(failures.length ? 1 : 0);
})().catch((err) => {
  console.log(JSON.stringify({ checked, failures: [String(err && err.stack || err)] }));
  process.exit(1);
});
